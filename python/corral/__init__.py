"""corral for Python: the task and actor runtime (docs/actors.md) and the
helpers of training scripts (corral.train).

    import corral
    corral.init()

    @corral.remote(resources={"TPU": 1})
    def where():
        import os
        return os.environ["TPU_VISIBLE_CHIPS"]

    print(corral.get([where.remote() for _ in range(4)]))

The runtime needs Debian's python3-cloudpickle and corral's C extension
(corral._core, built with corral); corral.train's helpers need neither, and
PyTorch is imported only by corral.train.torch when one of its functions
needs it.
"""

__version__ = "0.1.0"

from ._api import (  # noqa: F401
    ActorClass,
    ActorHandle,
    ObjectRef,
    RemoteFunction,
    available_resources,
    cancel,
    cluster_resources,
    get,
    get_accelerator_ids,
    get_actor,
    get_runtime_context,
    init,
    is_initialized,
    kill,
    nodes,
    put,
    remote,
    shutdown,
    wait,
)
from . import util  # noqa: F401,E402
from .exceptions import (  # noqa: F401
    ActorDiedError,
    ActorUnavailableError,
    CorralError,
    GetTimeoutError,
    ObjectLostError,
    ObjectStoreFullError,
    OwnerDiedError,
    TaskCancelledError,
    TaskError,
    TaskUnschedulableError,
    WorkerCrashedError,
)
