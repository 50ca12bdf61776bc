"""Quick check that Horovod works with TensorFlow 2 / Keras 3 in this environment.

Run with two local processes:

    .venv/bin/horovodrun -np 2 --gloo -H localhost:2 .venv/bin/python scripts/horovod_smoke.py

What it checks, on every rank (any failure raises, so horovodrun exits non-zero):
  * a tiny Keras 3 model starts with rank-dependent weights; broadcasting the
    underlying tf.Variables (``v.value``) from rank 0 makes them identical on all
    ranks, both eagerly (``hvd.broadcast_variables``) and inside a tf.function
    (``v.value.assign(hvd.broadcast(v.value, 0))``);
  * ``hvd.grouped_allreduce(op=hvd.Average)`` inside a tf.function averages
    per-rank tensors (rank r contributes r + 1), with and without fp16
    compression, and the function is traced only once over repeated calls.
    (One grouped_allreduce takes tensors of a single dtype: the op rejects a
    float32/float16 mix, so mixed-precision gradients must be grouped by dtype.)
Rank 0 prints ``horovod smoke: OK (size=N)`` at the end.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402


def build_model(seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(2)]
    )
    return model


def flat_weights(model):
    return tf.concat([tf.reshape(tf.cast(v.value, tf.float32), [-1]) for v in model.variables], 0)


def assert_same_on_all_ranks(vector, what):
    """Gathers `vector` from all ranks and checks every row equals rank 0's."""
    gathered = hvd.allgather(tf.reshape(vector, [1, -1])).numpy()
    assert gathered.shape[0] == hvd.size(), gathered.shape
    for r in range(1, hvd.size()):
        np.testing.assert_array_equal(gathered[r], gathered[0], err_msg=f"{what}: rank {r} != rank 0")


def assert_differs_across_ranks(vector, what):
    gathered = hvd.allgather(tf.reshape(vector, [1, -1])).numpy()
    assert any(
        not np.array_equal(gathered[r], gathered[0]) for r in range(1, hvd.size())
    ), f"{what}: expected different values across ranks before broadcast"


def check_broadcast():
    # 1. Eager: hvd.broadcast_variables on the underlying tf.Variables.
    model = build_model(seed=1234 + hvd.rank())
    before = flat_weights(model)
    if hvd.size() > 1:
        assert_differs_across_ranks(before, "initial weights")
    root_weights = hvd.broadcast(before, root_rank=0)
    hvd.broadcast_variables([v.value for v in model.variables], root_rank=0)
    after = flat_weights(model)
    np.testing.assert_array_equal(after.numpy(), root_weights.numpy())
    assert_same_on_all_ranks(after, "weights after eager broadcast_variables")

    # 2. Inside a tf.function: assign the broadcast value to each tf.Variable.
    model2 = build_model(seed=4321 + hvd.rank())
    tf_vars = [v.value for v in model2.variables]

    @tf.function
    def broadcast_in_graph():
        for var in tf_vars:
            var.assign(hvd.broadcast(var, root_rank=0))

    broadcast_in_graph()
    assert_same_on_all_ranks(flat_weights(model2), "weights after broadcast in tf.function")


def check_grouped_allreduce():
    traces = {"n": 0}

    @tf.function
    def average(tensors, fp16):
        traces["n"] += 1  # Python side effect: runs only while tracing
        compression = hvd.Compression.fp16 if fp16 else hvd.Compression.none
        return hvd.grouped_allreduce(tensors, op=hvd.Average, compression=compression)

    size = hvd.size()
    expected_mean = sum(r + 1 for r in range(size)) / size  # 1.5 for two ranks
    for fp16 in (False, True):
        traces["n"] = 0
        calls = 3
        for step in range(calls):
            scale = float(step + 1)
            tensors = [
                tf.fill([3], scale * (hvd.rank() + 1)),
                tf.fill([2, 2], 10.0 * scale * (hvd.rank() + 1)),
            ]
            out = average(tensors, fp16)
            np.testing.assert_allclose(out[0].numpy(), np.full([3], scale * expected_mean), rtol=1e-3)
            np.testing.assert_allclose(out[1].numpy(), np.full([2, 2], 10 * scale * expected_mean), rtol=1e-3)
            assert out[0].dtype == tf.float32, out[0].dtype
        assert traces["n"] == 1, f"grouped_allreduce function traced {traces['n']} times (fp16={fp16})"


def main():
    hvd.init()
    check_broadcast()
    check_grouped_allreduce()
    if hvd.rank() == 0:
        print(f"horovod smoke: OK (size={hvd.size()})", flush=True)


if __name__ == "__main__":
    main()
