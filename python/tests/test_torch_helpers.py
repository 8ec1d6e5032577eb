import contextlib
import io
import os
import sys
import unittest
from unittest import mock

try:
    import torch
    import corral.train.torch as ct
except ImportError:
    torch = None

CLEAR = [
    "CORRAL_JOB_ID", "CORRAL_ACCELERATOR_TYPE", "CORRAL_ACCELERATOR_IDS", "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS", "NEURON_RT_VISIBLE_CORES", "HABANA_VISIBLE_MODULES",
    "ZE_AFFINITY_MASK", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
]


@unittest.skipIf(torch is None, "torch not installed for this Python")
class DeviceTest(unittest.TestCase):
    def env(self, **kv):
        base = {k: v for k, v in os.environ.items() if k not in CLEAR}
        base.update(kv)
        return mock.patch.dict(os.environ, base, clear=True)

    def devices(self, cuda=False, count=0):
        ct._reset_notice()
        err = io.StringIO()
        with mock.patch.object(torch.cuda, "is_available", return_value=cuda), \
             mock.patch.object(torch.cuda, "device_count", return_value=count), \
             contextlib.redirect_stderr(err):
            first = ct.get_devices()
            again = ct.get_device()
        return first, again, err.getvalue()

    def test_given_gpus_without_cuda_falls_back_to_cpu_and_says_so_once(self):
        with self.env(CORRAL_JOB_ID="1", CORRAL_ACCELERATOR_TYPE="GPU", CORRAL_ACCELERATOR_IDS="3",
                      CUDA_VISIBLE_DEVICES="GPU-5f2c"):
            devs, dev, err = self.devices(cuda=False)
        self.assertEqual(devs, [torch.device("cpu")])
        self.assertEqual(dev, torch.device("cpu"))
        self.assertEqual(err.count("corral:"), 1, err)  # once, though asked twice
        self.assertIn("GPU 3", err)
        self.assertIn("CUDA_VISIBLE_DEVICES=GPU-5f2c", err)
        self.assertIn("using the CPU", err)

    def test_given_gpu_with_cuda_is_index_0_of_the_visible_ones(self):
        # the worker was given node GPU 3; after isolation it is cuda:0, never cuda:3
        with self.env(CORRAL_JOB_ID="1", CORRAL_ACCELERATOR_TYPE="GPU", CORRAL_ACCELERATOR_IDS="3",
                      CUDA_VISIBLE_DEVICES="3"):
            devs, dev, err = self.devices(cuda=True, count=1)
        self.assertEqual(devs, [torch.device("cuda", 0)])
        self.assertEqual(dev, torch.device("cuda", 0))
        self.assertEqual(err, "")

    def test_get_device_is_the_first_given_whatever_the_local_rank(self):
        # pins get_device() returning get_devices()[0]: a worker given GPUs
        # 4 and 5 sees them as cuda:0 and cuda:1 whatever its LOCAL_RANK
        # (the isolation already chose its devices); the local-rank-th
        # would put rank 1 on the second of its own GPUs, or another's
        with self.env(CORRAL_JOB_ID="1", CORRAL_ACCELERATOR_TYPE="GPU", CORRAL_ACCELERATOR_IDS="4,5",
                      CUDA_VISIBLE_DEVICES="4,5", LOCAL_RANK="1", RANK="3", WORLD_SIZE="4"):
            devs, dev, _ = self.devices(cuda=True, count=2)
        self.assertEqual(devs, [torch.device("cuda", 0), torch.device("cuda", 1)])
        self.assertEqual(dev, torch.device("cuda", 0))

    def test_never_more_devices_than_given(self):
        # isolation failed and all 8 show: still only the 2 it was given
        with self.env(CORRAL_JOB_ID="1", CORRAL_ACCELERATOR_TYPE="GPU", CORRAL_ACCELERATOR_IDS="4,5"):
            devs, _, _ = self.devices(cuda=True, count=8)
        self.assertEqual(devs, [torch.device("cuda", 0), torch.device("cuda", 1)])

    def test_given_nothing_gets_cpu_even_with_cuda(self):
        with self.env(CORRAL_JOB_ID="1", CORRAL_ACCELERATOR_TYPE="", CORRAL_ACCELERATOR_IDS=""):
            devs, _, err = self.devices(cuda=True, count=8)
        self.assertEqual(devs, [torch.device("cpu")])
        self.assertEqual(err, "")

    def test_given_tpu_without_torch_xla_falls_back_once(self):
        if "torch_xla" in sys.modules:
            self.skipTest("torch_xla present")
        with self.env(CORRAL_JOB_ID="1", CORRAL_ACCELERATOR_TYPE="TPU", CORRAL_ACCELERATOR_IDS="1",
                      TPU_VISIBLE_CHIPS="1"):
            devs, _, err = self.devices()
        self.assertEqual(devs, [torch.device("cpu")])
        self.assertEqual(err.count("corral:"), 1, err)
        self.assertIn("torch_xla", err)

    def test_outside_corral_a_vendor_variable_counts_as_given(self):
        with self.env(CUDA_VISIBLE_DEVICES="0"):
            devs, _, err = self.devices(cuda=False)
        self.assertEqual(devs, [torch.device("cpu")])
        self.assertIn("CUDA_VISIBLE_DEVICES=0", err)
        with self.env(CUDA_VISIBLE_DEVICES=""):
            devs, _, err = self.devices(cuda=True, count=1)
        self.assertEqual((devs, err), ([torch.device("cpu")], ""))

    def test_outside_corral_unrestricted_follows_local_rank(self):
        with self.env(LOCAL_RANK="1"):
            devs, _, _ = self.devices(cuda=True, count=2)
        self.assertEqual(devs, [torch.device("cuda", 1)])
        with self.env():
            devs, _, err = self.devices(cuda=False)
        self.assertEqual((devs, err), ([torch.device("cpu")], ""))

    def test_prepare_model(self):
        m = torch.nn.Linear(2, 1)
        with self.env():
            self.assertIs(ct.prepare_model(m, None), m)
            with self.assertRaisesRegex(ValueError, "not one of"):
                ct.prepare_model(m, "zero3")
            with self.assertRaisesRegex(RuntimeError, "init_process_group\\(\\) first"):
                ct.prepare_model(m, "ddp")

    def test_world_of_several_needs_master_addr(self):
        with self.env(RANK="0", WORLD_SIZE="2"):
            with self.assertRaisesRegex(ct.RendezvousError, "MASTER_ADDR/MASTER_PORT are not set"):
                ct.init_process_group(timeout=1)


if __name__ == "__main__":
    unittest.main()
