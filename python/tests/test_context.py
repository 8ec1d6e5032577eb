import unittest

from corral.train import get_context


class ContextTest(unittest.TestCase):
    def test_outside_corral_is_rank0_of_1(self):
        c = get_context({})
        self.assertEqual((c.rank, c.world_size, c.local_rank, c.local_world_size), (0, 1, 0, 1))
        self.assertEqual((c.node_rank, c.restart_count), (0, 0))
        self.assertIsNone(c.checkpoint_dir)
        self.assertEqual((c.accelerator_ids, c.accelerator_type), ((), ""))
        self.assertFalse(c.in_corral)
        self.assertTrue(c.is_rank0)

    def test_reads_what_corral_sets(self):
        env = {
            "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
            "NODE_RANK": "1", "GROUP_RANK": "1", "CORRAL_RESTART_COUNT": "2",
            "CORRAL_CHECKPOINT_DIR": "/ckpt", "CORRAL_ACCELERATOR_IDS": "4,5",
            "CORRAL_ACCELERATOR_TYPE": "GPU", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
            "CORRAL_JOB_ID": "17", "CORRAL_WORKER_ID": "17.5", "CORRAL_NODE_ID": "n1",
        }
        c = get_context(env)
        self.assertEqual((c.rank, c.world_size, c.local_rank, c.local_world_size, c.node_rank), (5, 8, 1, 4, 1))
        self.assertEqual(c.restart_count, 2)
        self.assertEqual(c.checkpoint_dir, "/ckpt")
        self.assertEqual(c.accelerator_ids, ("4", "5"))
        self.assertEqual(c.accelerator_type, "GPU")
        self.assertEqual((c.master_addr, c.master_port), ("10.0.0.1", 29500))
        self.assertEqual((c.job_id, c.worker_id, c.node_id), ("17", "17.5", "n1"))
        self.assertTrue(c.in_corral)
        self.assertFalse(c.is_rank0)

    def test_jax_variables_when_no_rank(self):
        c = get_context({"JAX_PROCESS_ID": "3", "JAX_NUM_PROCESSES": "4"})
        self.assertEqual((c.rank, c.world_size), (3, 4))

    def test_gpu_uuids_are_ids(self):
        c = get_context({"CORRAL_ACCELERATOR_IDS": "GPU-8ff6da72-388d,GPU-52e77ca2-4de5"})
        self.assertEqual(c.accelerator_ids, ("GPU-8ff6da72-388d", "GPU-52e77ca2-4de5"))

    def test_empty_accelerator_type_means_none_given(self):
        c = get_context({"CORRAL_ACCELERATOR_TYPE": "", "CORRAL_ACCELERATOR_IDS": ""})
        self.assertTrue(c.in_corral)
        self.assertEqual(c.accelerator_ids, ())

    def test_malformed_values_name_the_variable(self):
        with self.assertRaisesRegex(ValueError, "RANK='x' is not an integer"):
            get_context({"RANK": "x"})
        with self.assertRaisesRegex(ValueError, "RANK=4 is outside WORLD_SIZE=4"):
            get_context({"RANK": "4", "WORLD_SIZE": "4"})
        with self.assertRaisesRegex(ValueError, "WORLD_SIZE=0 is below 1"):
            get_context({"WORLD_SIZE": "0"})
        with self.assertRaisesRegex(ValueError, "CORRAL_ACCELERATOR_IDS='0,,1'"):
            get_context({"CORRAL_ACCELERATOR_IDS": "0,,1"})


if __name__ == "__main__":
    unittest.main()
