"""Which devices a worker trains on, from -g / -c."""


class DeviceError(Exception):
    """A device that this machine does not have."""


def check_devices(gpu_ids):
    """A DeviceError naming the GPUs of `-g` this machine does not have, found without importing MXNet: bad input
    is reported in a tenth of a second instead of three."""
    if not gpu_ids:
        return
    from training import mxnet_internals

    available = mxnet_internals.gpu_count()
    missing = [i for i in gpu_ids if i >= available]
    if missing:
        raise DeviceError(f"GPU {','.join(map(str, missing))} requested but MXNet sees "
                          f"{available} GPU(s) on this machine; use -c 1 for the CPU")


def contexts(gpu_ids, cpu_count):
    """MXNet contexts for `-g 0,1` (GPUs) or `-c N` (N CPU contexts, default 1)."""
    import mxnet as mx

    check_devices(gpu_ids)
    if gpu_ids:
        return [mx.gpu(i) for i in gpu_ids]
    return [mx.cpu(i) for i in range(max(1, cpu_count))]


def device_name(gpu_ids, cpu_count):
    """The log folder name of a device set: cpu, gpu0, gpu0_1."""
    if gpu_ids:
        return "gpu" + "_".join(map(str, gpu_ids))
    return "cpu" if cpu_count <= 1 else f"cpu{cpu_count}"
