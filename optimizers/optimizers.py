"""OpenSeq2Seq's module path, so that ported code keeps its imports; nothing is defined here.

OpenSeq2Seq users import ``optimize_loss`` and its helpers from
``open_seq2seq.optimizers.optimizers``; here the same line reads
``from optimizers.optimizers import optimize_loss``. The names below live in
``compat/openseq2seq.py`` (``optimize_loss``, its pipelines and helpers),
``catalog.py`` (the optimizers by name, ``make_optimizer``), ``compat/tf1.py``
and ``pipeline.py``; new code imports them from the package
(``from optimizers import optimize_loss``).

It sits beside the core modules because the path is the seeds' promise to
users, but it belongs to the compatibility room: no core module imports it.
"""

# pylint: disable=unused-import
from optimizers.catalog import OPTIMIZER_CLS_NAMES  # noqa: F401
from optimizers.catalog import make_optimizer  # noqa: F401
from optimizers.compat.openseq2seq import _clip_by_global_norm  # noqa: F401
from optimizers.compat.openseq2seq import _clip_gradients_by_norm  # noqa: F401
from optimizers.compat.openseq2seq import clear_pipelines  # noqa: F401
from optimizers.compat.openseq2seq import find_pipeline  # noqa: F401
from optimizers.compat.openseq2seq import get_pipeline  # noqa: F401
from optimizers.compat.openseq2seq import get_regularization_loss  # noqa: F401
from optimizers.compat.openseq2seq import optimize_loss  # noqa: F401
from optimizers.pipeline import GradientPipeline  # noqa: F401
from optimizers.compat.tf1 import MomentumOptimizer  # noqa: F401
from optimizers.validation import SUMMARY_NAMES as OPTIMIZER_SUMMARIES  # noqa: F401
