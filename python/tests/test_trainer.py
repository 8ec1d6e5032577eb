"""corral.train.TorchTrainer's parts that need no cluster: configuration
checks, the node address and device parsing, the failure summary, and one
worker's report()/get_checkpoint() commit in a run directory
(tests/cluster/trainer.sh runs the whole trainer on a simulated slice)."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import corral.train as train  # noqa: E402
from corral.train import _session, _trainer  # noqa: E402

try:
    import torch.distributed  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


class Parts(unittest.TestCase):
    def test_host(self):
        self.assertEqual(_trainer._host("127.0.0.31"), "127.0.0.31")
        self.assertEqual(_trainer._host("127.0.0.1:43055"), "127.0.0.1")  # the head's own node
        self.assertEqual(_trainer._host("[::1]:43055"), "::1")
        self.assertEqual(_trainer._host("fe80::1"), "fe80::1")
        self.assertEqual(_trainer._host("/run/corral/head.sock"), "127.0.0.1")
        self.assertEqual(_trainer._host(""), "127.0.0.1")

    def test_devices(self):
        self.assertEqual((_trainer._first_dev("2,0,3"), _trainer._ndevs("2,0,3")), (0, 3))
        self.assertEqual((_trainer._first_dev(""), _trainer._ndevs("")), (-1, 0))
        self.assertEqual(_trainer._first_dev("TPU:5,TPU:4"), 4)

    def test_why_names_the_cause_first(self):
        why = _trainer._why({1: RuntimeError("[gloo] Connection reset by peer"),
                             2: RuntimeError("the worker died: exit code 1"),
                             3: RuntimeError("Connection closed by peer")})
        self.assertTrue(why.startswith("rank 2: the worker died: exit code 1"), why)
        self.assertIn("ranks 1, 3 then lost their peer", why)
        self.assertEqual(_trainer._why({0: ValueError("bad")}), "rank 0: bad")

    def test_config_checks(self):
        f = lambda: None  # noqa: E731
        with self.assertRaisesRegex(ValueError, "placement_strategy"):
            train.TorchTrainer(f, scaling_config=train.ScalingConfig(num_workers=2, placement_strategy="NEAR"))
        with self.assertRaisesRegex(ValueError, "topology"):
            train.TorchTrainer(f, scaling_config=train.ScalingConfig(use_tpu=True))
        with self.assertRaisesRegex(ValueError, "num_workers"):
            train.TorchTrainer(f, scaling_config=train.ScalingConfig(num_workers=0))
        with self.assertRaisesRegex(ValueError, "max_failures"):
            train.TorchTrainer(f, scaling_config=train.ScalingConfig(num_workers=1),
                               run_config=train.RunConfig(failure_config=train.FailureConfig(max_failures=-2)))
        with self.assertRaisesRegex(ValueError, "datasets"):
            train.TorchTrainer(f, scaling_config=train.ScalingConfig(num_workers=1), datasets={"x": 1})
        with self.assertRaises(TypeError):
            train.TorchTrainer(3)

    def test_outside_a_trainer(self):
        with self.assertRaisesRegex(RuntimeError, "inside the training function"):
            train.report({"x": 1})
        with self.assertRaisesRegex(RuntimeError, "inside the training function"):
            train.get_checkpoint()
        with self.assertRaises(ValueError):
            train.Checkpoint.from_directory("/nonexistent/dir")


@unittest.skipUnless(HAVE_TORCH, "torch.distributed is not importable")
class OneWorker(unittest.TestCase):
    def test_report_commits_and_prunes(self):
        with tempfile.TemporaryDirectory() as run, tempfile.TemporaryDirectory() as src:
            _session._start(run, 0, 1, 0, 2)
            try:
                self.assertIsNone(train.get_checkpoint())
                for step in range(4):
                    with open(os.path.join(src, "w"), "w") as f:
                        f.write(str(step))
                    train.report({"step": step}, checkpoint=train.Checkpoint.from_directory(src))
                train.report({"step": 4})  # no checkpoint: latest stays
                ck = train.get_checkpoint()
            finally:
                _session._end()
            self.assertEqual(os.path.basename(ck.path), "checkpoint_000003")
            with ck.as_directory() as d, open(os.path.join(d, "w")) as f:
                self.assertEqual(f.read(), "3")
            self.assertEqual(sorted(n for n in os.listdir(run) if n.startswith("checkpoint_")),
                             ["checkpoint_000002", "checkpoint_000003"])
            with open(os.path.join(run, "result.json")) as f:
                lines = [json.loads(x) for x in f]
            self.assertEqual([x["step"] for x in lines], [0, 1, 2, 3, 4])
            self.assertEqual(lines[3]["_checkpoint"], "checkpoint_000003")
            self.assertNotIn("_checkpoint", lines[4])
            # a new attempt goes on counting after the last committed report
            s = _session._start(run, 0, 1, 1, 2)
            _session._end()
            self.assertEqual(s.report_index, 4)


if __name__ == "__main__":
    unittest.main()
