"""The ground of the framework: helpers that import no TensorFlow.

Every other package stands on these: name registries whose entries may be
imported on first lookup (``core.registry``), package exports loaded on first
access (``core.lazy``), parameter checking with one-line config errors
(``core.params``), the precision names (``core.precision``) and the restart
under tcmalloc that run.py makes before anything allocates
(``core.allocator``), and the signals that stop a run or a sweep with their
exit status (``core.signals``). Nothing here
imports TensorFlow, Keras or another package of this repository, so the config
layer can use it before TensorFlow is loaded (docs/architecture.md;
tests/core/test_layers.py checks it).
"""
