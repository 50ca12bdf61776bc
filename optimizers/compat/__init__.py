"""OpenSeq2Seq's and TF 1's names for the package, in a room of their own.

``optimize_loss`` with OpenSeq2Seq's signature and the pipelines it keeps per
model (``openseq2seq.py``), and the loss-scale optimizers with TF 1's
``tf.train.experimental`` and OpenSeq2Seq's ``mp_wrapper`` names
(``loss_scale_optimizer.py``), and TensorFlow 1's optimizers, which the names of
OpenSeq2Seq's ``OPTIMIZER_CLS_NAMES`` mean (``tf1.py``). They sit on the core (``pipeline``, ``stages``,
``backend``), which never imports them. OpenSeq2Seq's module path
``optimizers.optimizers`` is the file ``optimizers/optimizers.py``, which
reads its names from here.
"""
