"""A leased worker's cancel of the call its main thread runs (corral._worker
ExecQueue, docs/actors.md): a real SIGINT that ends a blocking wait, raised
only while that very call runs, and Python's own KeyboardInterrupt for a
SIGINT no cancel sent. No daemon: the queue's state is set as Runner.handle
sets it."""
import os
import signal
import threading
import time
import unittest

from corral._worker import ExecQueue

CONN = object()


class CancelTest(unittest.TestCase):
    def setUp(self):
        self.q = ExecQueue()
        self.old = signal.signal(signal.SIGINT, self.q.on_interrupt)

    def tearDown(self):
        signal.signal(signal.SIGINT, self.old)

    def running(self, ident):
        key = (id(CONN), ident)
        self.q.running[key] = threading.get_ident()
        self.q.current = key
        return key

    def signal_left_alone(self, key):
        """A cancel's SIGINT for key arrives: nothing is raised here."""
        self.q.interrupt = key
        self.q.kills_sent += 1
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # the handler runs
        except KeyboardInterrupt:
            self.fail("a cancel's SIGINT raised KeyboardInterrupt in a call it does not cancel")
        self.assertEqual(self.q.kills_seen, self.q.kills_sent)

    def cancel_soon(self, ident):
        t = threading.Thread(target=lambda: (time.sleep(0.05), self.q.cancel(ident, CONN)))
        t.start()
        return t

    def assert_interrupted(self, ident, wait):
        """Call ident, running here, is cancelled from another thread while
        in wait(30): KeyboardInterrupt ends the wait (not interrupted, it
        returns after 30 s and the test fails)."""
        self.running(ident)
        t = self.cancel_soon(ident)
        with self.assertRaises(KeyboardInterrupt):
            wait(30)
        t.join()

    def test_ends_a_blocking_sleep(self):
        self.assert_interrupted(7, time.sleep)
        self.assertIsNone(self.q.interrupt)

    def test_ends_a_blocking_wait_on_an_event(self):
        self.assert_interrupted(8, threading.Event().wait)

    def test_a_call_that_ended_meanwhile_is_left_alone(self):
        key = self.running(9)
        self.q.current = None  # the call returned before the signal came
        self.signal_left_alone(key)

    def test_another_calls_cancel_is_not_raised_in_this_one(self):
        self.running(10)
        self.signal_left_alone((id(CONN), 11))

    def test_a_second_cancel_of_the_same_call_is_not_raised(self):
        self.assert_interrupted(14, time.sleep)
        # still in its handler (current not cleared yet): a second cancel
        try:
            self.q.cancel(14, CONN)
            time.sleep(0.01)  # its SIGINT is handled here: nothing is raised
        except KeyboardInterrupt:
            self.fail("a second cancel of the same call raised KeyboardInterrupt again")
        self.assertEqual(self.q.kills_seen, self.q.kills_sent)

    def test_a_queued_call_is_marked_not_signalled(self):
        self.q.cancel(12, CONN)
        self.assertIn((id(CONN), 12), self.q.cancelled)
        self.assertEqual(self.q.kills_sent, 0)

    def test_a_sigint_no_cancel_sent_is_python_s(self):
        self.running(13)
        with self.assertRaises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(3600)


if __name__ == "__main__":
    unittest.main()
