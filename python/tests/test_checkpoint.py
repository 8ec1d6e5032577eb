import os
import shutil
import tempfile
import unittest
from unittest import mock

from corral.train import _checkpoint, checkpoint_path, load_checkpoint, save_checkpoint

try:
    import torch
except ImportError:
    torch = None


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="corral-ckpt-")
        self.env = mock.patch.dict(os.environ, {"CORRAL_CHECKPOINT_DIR": self.dir, "RANK": "0", "WORLD_SIZE": "2"})
        self.env.start()

    def tearDown(self):
        self.env.stop()
        shutil.rmtree(self.dir)

    def files(self):
        return sorted(os.listdir(self.dir))

    def test_none_before_any_save(self):
        self.assertIsNone(load_checkpoint())
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertIsNone(load_checkpoint())  # no directory at all

    def test_roundtrip_pickle_and_json(self):
        path = save_checkpoint({"step": 3, "losses": [1.0, 0.5]})
        self.assertEqual(path, os.path.join(self.dir, "checkpoint"))
        with open(path, "rb") as f:
            self.assertEqual(f.read(1), b"\x80")  # pickle, no torch objects
        self.assertEqual(load_checkpoint(), {"step": 3, "losses": [1.0, 0.5]})
        save_checkpoint({"step": 4}, format="json")
        self.assertEqual(load_checkpoint(), {"step": 4})
        self.assertEqual(self.files(), ["checkpoint"])  # no temporary file left

    def test_only_rank0_writes_by_default(self):
        with mock.patch.dict(os.environ, {"RANK": "1"}):
            self.assertIsNone(save_checkpoint({"step": 1}))
            self.assertEqual(self.files(), [])
            p = save_checkpoint({"step": 1}, name="rank1", all_ranks=True)
            self.assertEqual(p, os.path.join(self.dir, "rank1"))

    def test_without_directory_save_says_what_to_set(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaisesRegex(RuntimeError, "CORRAL_CHECKPOINT_DIR is not set"):
                save_checkpoint({"step": 1})

    def test_fsyncs_file_and_directory_before_and_after_rename(self):
        calls = []
        real_fsync, real_replace = os.fsync, os.replace
        with mock.patch.object(_checkpoint.os, "fsync", side_effect=lambda fd: (calls.append("fsync"), real_fsync(fd))), \
             mock.patch.object(_checkpoint.os, "replace", side_effect=lambda a, b: (calls.append("replace"), real_replace(a, b))):
            save_checkpoint({"step": 1})
        self.assertEqual(calls, ["fsync", "replace", "fsync"])

    def test_failed_write_keeps_the_old_checkpoint(self):
        save_checkpoint({"step": 1})

        class Boom:
            def __reduce__(self):
                raise RuntimeError("disk full (simulated)")

        with self.assertRaisesRegex(RuntimeError, "simulated"):
            save_checkpoint({"step": 2, "bad": Boom()})
        self.assertEqual(load_checkpoint(), {"step": 1})
        self.assertEqual(self.files(), ["checkpoint"])

    def test_crash_before_rename_keeps_the_old_checkpoint(self):
        save_checkpoint({"step": 1})
        with mock.patch.object(_checkpoint.os, "replace", side_effect=OSError("crash (simulated)")):
            with self.assertRaises(OSError):
                save_checkpoint({"step": 2})
        self.assertEqual(load_checkpoint(), {"step": 1})
        self.assertEqual(self.files(), ["checkpoint"])

    def test_garbage_is_reported(self):
        with open(checkpoint_path(), "wb") as f:
            f.write(b"not a checkpoint")
        with self.assertRaisesRegex(RuntimeError, "neither a torch, pickle nor JSON"):
            load_checkpoint()

    @unittest.skipIf(torch is None, "torch not installed")
    def test_torch_state_uses_torch_save(self):
        m = torch.nn.Linear(3, 1)
        save_checkpoint({"step": 7, "model": m.state_dict()})
        with open(checkpoint_path(), "rb") as f:
            self.assertEqual(f.read(4), b"PK\x03\x04")
        got = load_checkpoint()
        self.assertEqual(got["step"], 7)
        self.assertTrue(torch.equal(got["model"]["weight"], m.state_dict()["weight"]))


if __name__ == "__main__":
    unittest.main()
