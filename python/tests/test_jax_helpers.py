"""corral.train.jax: the arguments it computes from the variables corral
train sets, and that initialize() hands exactly those to
jax.distributed.initialize(). JAX is not installed here: the last test puts
a stand-in module named jax in sys.modules (STAND-IN, it records the call
and nothing else) to see what would be passed; the real JAX never runs."""
import os
import sys
import types
import unittest
from unittest import mock

import corral.train.jax as cj


class InitializeArgsTest(unittest.TestCase):
    def test_from_corral_variables(self):
        # what sched/gang.c sets for rank 3 of 4 (tests/unit/test_sched_gang.c)
        env = {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:29501", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3",
               "MASTER_PORT": "29500"}
        self.assertEqual(cj.initialize_args(env),
                         {"coordinator_address": "10.0.0.1:29501", "num_processes": 4, "process_id": 3})

    def test_outside_corral(self):
        self.assertIsNone(cj.initialize_args({}))
        self.assertIsNone(cj.initialize_args({"JAX_COORDINATOR_ADDRESS": " "}))

    def test_bad_values_say_what(self):
        with self.assertRaisesRegex(ValueError, "JAX_NUM_PROCESSES='x' is not an integer"):
            cj.initialize_args({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "x", "JAX_PROCESS_ID": "0"})
        with self.assertRaisesRegex(ValueError, "JAX_PROCESS_ID=4 is outside JAX_NUM_PROCESSES=4"):
            cj.initialize_args({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "4"})
        with self.assertRaisesRegex(ValueError, "expected HOST:PORT"):
            cj.initialize_args({"JAX_COORDINATOR_ADDRESS": "h", "JAX_NUM_PROCESSES": "1", "JAX_PROCESS_ID": "0"})


class InitializeTest(unittest.TestCase):
    def test_outside_corral_does_not_import_jax(self):
        with mock.patch.dict(os.environ, {}, clear=True), mock.patch.dict(sys.modules, {"jax": None}):
            self.assertIsNone(cj.initialize())  # sys.modules["jax"] = None: an import would raise
            with self.assertRaises(cj.NotUnderCorral):
                cj.initialize(require=True)

    def test_passes_corral_values_to_jax(self):
        calls = []
        standin = types.ModuleType("jax")  # STAND-IN for JAX: records the call only
        standin.distributed = types.SimpleNamespace(initialize=lambda **kw: calls.append(kw))
        env = {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:29501", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}
        with mock.patch.dict(os.environ, env, clear=True), mock.patch.dict(sys.modules, {"jax": standin}):
            used = cj.initialize(initialization_timeout=30)
        want = {"coordinator_address": "10.0.0.1:29501", "num_processes": 2, "process_id": 1,
                "initialization_timeout": 30}
        self.assertEqual(calls, [want])
        self.assertEqual(used, want)


if __name__ == "__main__":
    unittest.main()
