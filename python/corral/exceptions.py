"""The errors corral's task runtime raises (docs/actors.md, "Failures")."""


class CorralError(Exception):
    """Base of corral's runtime errors."""


class TaskError(CorralError):
    """A task or actor method raised. ``str()`` holds the remote traceback;
    the instance is also an instance of the remote exception's class when
    that class can be subclassed (``except ValueError`` still works), and
    ``cause`` is the remote exception itself when it could be unpickled."""

    def __init__(self, function, cls_name, message, traceback_text, cause=None):
        self.function = function
        self.cls_name = cls_name
        self.message = message
        self.traceback_text = traceback_text
        self.cause = cause
        super().__init__(self._text())

    def _text(self):
        return "%s failed with %s: %s\n\nremote traceback:\n%s" % (
            self.function, self.cls_name, self.message, self.traceback_text.rstrip())

    def __str__(self):
        return self._text()

    def __reduce__(self):
        return (TaskError, (self.function, self.cls_name, self.message, self.traceback_text, None))


def as_instance_of_cause(err):
    """err (TaskError) -> an object that is both a TaskError and an instance
    of its cause's class, when that class allows it; else err."""
    cause = err.cause
    if cause is None or isinstance(cause, TaskError):
        return err
    cls = type(cause)
    try:
        dual = type("TaskError(%s)" % cls.__name__, (TaskError, cls), {
            "__init__": lambda self, *a: None,
            "__str__": lambda self: TaskError._text(self),
            "__reduce__": TaskError.__reduce__,
        })
        e = dual()
        e.__dict__.update(err.__dict__)
        e.args = getattr(cause, "args", ())
        return e
    except TypeError:
        return err


class WorkerCrashedError(CorralError):
    """The worker process running a task died, and no retries were left."""


class ActorDiedError(CorralError):
    """The actor's process died and will not come back (no restarts left,
    killed, or its constructor failed), or it died while this call ran."""


class ActorUnavailableError(CorralError):
    """The actor is restarting; this call was in flight when it died and
    max_task_retries did not allow it again."""


class OwnerDiedError(CorralError):
    """The process that owns an object (made the ref) is gone, and the
    object with it."""


class ObjectLostError(CorralError):
    """The object's value is gone (its owner freed it)."""


class TaskCancelledError(CorralError):
    """corral.cancel() stopped this task."""


class TaskUnschedulableError(CorralError):
    """The head can never place what the task or actor asks for."""


class GetTimeoutError(CorralError, TimeoutError):
    """corral.get(timeout=) passed before the value was there."""


class ObjectStoreFullError(CorralError):
    """corral.put waited for room in the object store and none came."""
