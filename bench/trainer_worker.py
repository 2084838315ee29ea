"""A dist_sync (or dist_async) worker on MXNet's standard path, gluon.Trainer(kvstore=...), as the baseline of the sync benchmark.

Same network, data, batch and devices as `main.py -m sync`; it records the wall time at the end of every step:

    DMLC_ROLE=worker ... python -m bench.trainer_worker -n lenet --dataset mnist-5k --iters 200 --out steps.json
"""
import argparse
import time

from training import mxnet_internals
from training.devices.threads import limit_compute_threads

mxnet_internals.install()  # before MXNet's import, as main.py: its operator cache and numpy's aliases
limit_compute_threads("worker")  # the OpenMP threads main.py gives a worker of the same job

import mxnet as mx  # noqa: E402
from mxnet import gluon

from data import BatchStream, load_dataset, partition
from training.files import write_json
from training.model import Model


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", "--network", default="lenet")
    p.add_argument("--dataset", default="mnist-5k")
    p.add_argument("-dd", "--data-dir", default="data")
    p.add_argument("-b", "--batch-size", type=int, default=64)
    p.add_argument("-l", "--learning-rate", type=float, default=0.001)
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--update-on-workers", action="store_true",
                   help="each worker updates the weights from the pulled sums (update_on_kvstore=False), as main.py's "
                        "sync does; by default the servers update them, MXNet's default for dist_sync")
    p.add_argument("--kvstore", choices=("dist_sync", "dist_async"), default="dist_sync",
                   help="dist_async: the servers apply each worker's gradient as it comes (main.py's async)")
    args = p.parse_args()

    data = load_dataset(args.data_dir, args.dataset)
    kv = mx.kv.create(args.kvstore)
    share = partition(data.train_labels, kv.rank, kv.num_workers)
    stream = BatchStream(data.train_images[share], data.train_labels[share], args.batch_size, kv.rank)
    model = Model(args.network, [mx.cpu()], data.train_images.shape[1:])
    params = model.net.collect_params()
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": args.learning_rate}, kvstore=kv,
                            update_on_kvstore=False if args.update_on_workers else None)
    trainer._init_kvstore()  # initialise the keys now, not at the first step
    trainer._init_params()
    step_ends = []
    for _ in range(args.iters):
        images, labels = stream.next()
        # Gluon's idiom: step() right after backward is queued, so that each gradient's push starts once it is
        # written (gradients of the loss summed over the batch, as main.py uses them).
        model.forward_backward(images, labels, while_backward=lambda: trainer.step(1))
        mx.nd.waitall()
        step_ends.append(time.time())
    if kv.rank == 0:
        write_json(args.out, {"batch_size": args.batch_size, "step_ends": step_ends})


if __name__ == "__main__":
    main()
