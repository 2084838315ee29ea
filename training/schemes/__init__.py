"""The synchronization schemes, by the name of their -m mode."""
from training.schemes.asynchronous import DCASGD, Async
from training.schemes.esync import ESync
from training.schemes.local import Local
from training.schemes.nbsync import NonBlockingSync
from training.schemes.sync import Sync
from training.schemes.zeno import ZenoAsync, ZenoSync

SCHEMES = {cls.name: cls for cls in (Local, Sync, Async, DCASGD, ESync, NonBlockingSync, ZenoSync)}


def scheme_for(mode, use_dcasgd=0, zeno_flavour="sync"):
    if mode == "zeno" and zeno_flavour == "async":
        return ZenoAsync
    return SCHEMES["dcasgd" if mode == "async" and use_dcasgd else mode]
