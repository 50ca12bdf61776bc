"""The fused optimizer paths give the numbers of the per-variable reference paths.

Every test runs twice: with the native kernels (``optimizers/native.py``,
the default on a CPU) and with them turned off, which leaves the XLA path
(``backend.py``). Both take the norms in another summation order than
``tf.norm`` and the XLA path may contract a multiply-add, so they may differ
from the reference paths in the last bits of a float32 sum or product;
every comparison here uses rtol = 1e-6, and for values that pass through
zero an atol of 1e-6 times the largest value of the array.

The reference paths (``fused=False``, Keras' SGD, ``references.larc_reference``) never
take a native kernel, so the numbers of each are computed once and shared by
the two runs of a test (:func:`reference`).
"""



import numpy as np
import pytest
import keras
import tensorflow as tf

from optimizers import backend
from optimizers import lars as lars_lib
from optimizers import native
from optimizers import pipeline as pipeline_lib
from optimizers import stages
from optimizers import validation
from optimizers.compat import openseq2seq as opt_lib
from optimizers.compat.openseq2seq import optimize_loss
from optimizers.lamb import LAMB
from optimizers.lars import LARSOptimizer
from optimizers.lars import KerasMomentum
from tests.optimizers import references

RTOL = 1e-6
ATOL = 1e-8
SHAPES = {'dense/kernel': (6, 5), 'dense/bias': (5,), 'conv/kernel': (3, 3, 2, 4),
          'batch_normalization/gamma': (4,), 'zero/kernel': (3, 2)}
STEPS = 4
# The numbers of the reference paths, by what they ran (see reference()).
_REFERENCES = {}


@pytest.fixture(autouse=True)
def fresh_pipelines():
  opt_lib.clear_pipelines()
  yield
  opt_lib.clear_pipelines()


@pytest.fixture(autouse=True, params=['native', 'xla'])
def fused_path(request, monkeypatch):
  """Runs each test on the native kernels and on the XLA path."""
  monkeypatch.setenv(native.ENV_SWITCH, '1' if request.param == 'native' else '0')
  if request.param == 'native':
    assert native.load() is not None, native.error()
  return request.param


def reference(key, compute):
  """``compute()``, once per ``key`` in this session: a reference path's numbers.

  Only for paths that never take a native kernel, whose numbers the native
  switch of ``fused_path`` cannot change.
  """
  if key not in _REFERENCES:
    _REFERENCES[key] = compute()
  return _REFERENCES[key]


def make_variables(seed=0):
  """Keras variables named like a model's, one of them all zeros (trust ratio 1)."""
  rng = np.random.default_rng(seed)
  variables = []
  for path, shape in SHAPES.items():
    value = np.zeros(shape) if path.startswith('zero') else rng.normal(size=shape)
    layer, name = path.split('/')
    with keras.name_scope(layer):
      variables.append(keras.Variable(value.astype(np.float32), name=name))
  return variables


def make_gradients(step, seed=1):
  rng = np.random.default_rng(seed + step)
  grads = []
  for path, shape in SHAPES.items():
    g = rng.normal(scale=0.1, size=shape).astype(np.float32)
    if path == 'conv/kernel' and step == 1:
      g[:] = 0.0  # a zero gradient norm: trust ratio 1
    grads.append(tf.constant(g))
  return grads


def run(optimizer, steps=STEPS, in_function=True):
  variables = make_variables()
  optimizer.build(variables)

  def step(grads):
    optimizer.apply(grads, variables)

  step = tf.function(step) if in_function else step
  for i in range(steps):
    step(make_gradients(i))
  return variables


def assert_same(fused_values, reference_values):
  """Equal within RTOL of each value, or of the array's largest value for values near zero.

  An element that is the difference of two numbers of the array's scale (w − v
  after cancellation) carries their rounding, one float32 ulp of that scale.
  """
  for got, want in zip(fused_values, reference_values):
    want = np.asarray(want)
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL + RTOL * scale)


def slot_values(optimizer, variables, name):
  return [optimizer.get_slot(v, name).numpy() for v in variables]


def momentum_values(optimizer, variables):
  """The momentum slots of a Keras SGD or of a framework optimizer."""
  if isinstance(optimizer, keras.optimizers.SGD):
    return [optimizer.momentums[optimizer._get_variable_index(v)].numpy() for v in variables]
  return slot_values(optimizer, variables, 'momentum')


@pytest.mark.parametrize('nesterov', [False, True])
@pytest.mark.parametrize('skip_list', [None, ['batch_normalization', 'bias']])
def test_lars_fused_matches_reference(nesterov, skip_list):
  kwargs = dict(momentum=0.9, weight_decay=0.01, eeta=0.02, epsilon=1e-5,
                use_nesterov=nesterov, skip_list=skip_list)
  fused_opt = LARSOptimizer(0.5, **kwargs)
  fused_vars = run(fused_opt)

  def reference_run():
    reference_opt = LARSOptimizer(0.5, fused=False, **kwargs)
    variables = run(reference_opt)
    return [v.numpy() for v in variables], slot_values(reference_opt, variables, 'momentum')

  weights, momentums = reference(('lars', nesterov, str(skip_list)), reference_run)
  assert_same([v.numpy() for v in fused_vars], weights)
  assert_same(slot_values(fused_opt, fused_vars, 'momentum'), momentums)


def test_lars_fused_eager_matches_reference():
  fused_vars = run(LARSOptimizer(0.3, weight_decay=0.01, eeta=0.05), steps=2, in_function=False)
  reference_vars = run(LARSOptimizer(0.3, weight_decay=0.01, eeta=0.05, fused=False), steps=2,
                       in_function=False)
  assert_same([v.numpy() for v in fused_vars], [v.numpy() for v in reference_vars])


def test_lars_fused_update_is_traced_once(monkeypatch):
  monkeypatch.setenv(native.ENV_SWITCH, '0')  # the XLA launches are what is traced
  optimizer = LARSOptimizer(0.1)
  variables = make_variables()
  optimizer.build(variables)
  step = tf.function(lambda grads: optimizer.apply(grads, variables))
  step(make_gradients(0))
  update = backend.jit_for(optimizer, lars_lib.lars_update_all, 'lars_update_all_0')
  assert update.experimental_get_tracing_count() == 1
  for i in range(1, 4):
    step(make_gradients(i))
  assert step.experimental_get_tracing_count() == 1
  assert update.experimental_get_tracing_count() == 1


def test_a_second_model_of_the_same_shapes_trains_after_the_first_is_deleted():
  """Each optimizer keeps its own compiled update (a shared trace would point at dead variables)."""
  for _ in range(2):
    variables = make_variables()
    optimizer = LARSOptimizer(0.1)
    tf.function(lambda grads: optimizer.apply(grads, variables))(make_gradients(0))
    del variables, optimizer


def test_lars_sparse_gradient_takes_the_reference_path():
  var = keras.Variable(np.arange(8, dtype=np.float32).reshape(4, 2), name='embedding')
  dense = keras.Variable(np.ones((2, 2), np.float32), name='kernel')
  optimizers = [LARSOptimizer(0.1, momentum=0.5), LARSOptimizer(0.1, momentum=0.5, fused=False)]
  results = []
  for optimizer in optimizers:
    var.assign(np.arange(8, dtype=np.float32).reshape(4, 2))
    dense.assign(np.ones((2, 2), np.float32))
    sparse = tf.IndexedSlices(tf.constant([[1.0, 2.0]]), tf.constant([1]), tf.constant([4, 2]))
    optimizer.apply_gradients([(sparse, var), (tf.constant([[0.1, 0.2], [0.3, 0.4]]), dense)])
    results.append((var.numpy().copy(), dense.numpy().copy()))
  assert_same(results[0], results[1])


@pytest.mark.parametrize('exclusions', [None, ['bias'], ['bias', 'gamma']])
def test_lamb_fused_matches_reference(exclusions):
  kwargs = dict(beta_1=0.9, beta_2=0.99, epsilon=1e-6, weight_decay=0.1,
                exclude_from_weight_decay=exclusions,
                exclude_from_layer_adaptation=['gamma'] if exclusions else None)
  fused_opt = LAMB(0.01, **kwargs)
  fused_vars = run(fused_opt)

  def reference_run():
    reference_opt = LAMB(0.01, fused=False, **kwargs)
    variables = run(reference_opt)
    return [v.numpy() for v in variables], {
        name: slot_values(reference_opt, variables, name) for name in ('m', 'v')}

  weights, slots = reference(('lamb', str(exclusions)), reference_run)
  assert_same([v.numpy() for v in fused_vars], weights)
  for name in ('m', 'v'):
    assert_same(slot_values(fused_opt, fused_vars, name), slots[name])


@pytest.mark.parametrize('nesterov', [False, True])
def test_momentum_xla_update_matches_keras_sgd(nesterov):
  fused_vars = run(KerasMomentum(0.1, momentum=0.9, use_nesterov=nesterov))
  weights = reference(('sgd', nesterov), lambda: [
      v.numpy() for v in run(keras.optimizers.SGD(0.1, momentum=0.9, nesterov=nesterov))])
  assert_same([v.numpy() for v in fused_vars], weights)


@pytest.mark.parametrize('mode', ['clip', 'scale'])
@pytest.mark.parametrize('skip_list', [None, ['bias']])
def test_larc_fused_matches_reference(mode, skip_list):
  variables = make_variables()
  grads = make_gradients(0)
  params = validation.check_larc_params({'larc_eta': 0.02, 'larc_mode': mode, 'skip_list': skip_list})
  got, got_factors = stages.larc(grads, variables, 0.5, params)
  want, want_factors = references.larc_reference(grads, variables, 0.5, params)
  assert sorted(got_factors) == sorted(want_factors)
  assert_same([got_factors[i].numpy() for i in sorted(got_factors)],
              [want_factors[i].numpy() for i in sorted(want_factors)])
  assert_same([g.numpy() for g in got], [g.numpy() for g in want])


def larc_step(optimizer, larc, variables, params):
  """A step applying LARC then the optimizer (``larc_and_apply`` for a KerasMomentum)."""

  def step(grads):
    if isinstance(optimizer, KerasMomentum):
      return pipeline_lib.larc_and_apply(optimizer, grads, variables, 0.5, params)
    grads, factors = larc(grads, variables, 0.5, params)
    optimizer.apply(grads, variables)
    return factors

  return step


@pytest.mark.parametrize('mode', ['clip', 'scale'])
@pytest.mark.parametrize('nesterov', [False, True])
def test_larc_and_momentum_match_larc_then_keras_sgd(mode, nesterov):
  """``larc_and_apply`` (one kernel with native kernels on) against LARC then Keras' SGD."""
  params = validation.check_larc_params({'larc_eta': 0.02, 'larc_mode': mode, 'min_update': 0.05,
                                     'skip_list': ['bias']})

  def steps(optimizer, larc):
    variables = make_variables()
    optimizer.build(variables)
    step = tf.function(larc_step(optimizer, larc, variables, params))
    for i in range(STEPS):
      factors = step(make_gradients(i))
    return ([v.numpy() for v in variables], momentum_values(optimizer, variables),
            {i: f.numpy() for i, f in factors.items()})

  got_w, got_m, got_f = steps(KerasMomentum(0.5, momentum=0.9, use_nesterov=nesterov),
                              stages.larc)
  want_w, want_m, want_f = reference(
      ('larc then sgd', mode, nesterov),
      lambda: steps(keras.optimizers.SGD(0.5, momentum=0.9, nesterov=nesterov),
                    references.larc_reference))
  assert_same(got_w, want_w)
  assert_same(got_m, want_m)
  assert sorted(got_f) == sorted(want_f) == [0, 2, 3, 4]
  assert_same([got_f[i] for i in sorted(got_f)], [want_f[i] for i in sorted(want_f)])


def test_squared_norms_and_global_norm_match_numpy():
  rng = np.random.default_rng(3)
  tensors = [rng.normal(size=s).astype(np.float32) for s in [(7,), (3, 4), (2, 2, 5), (0,)]]
  got = backend.squared_norms([tf.constant(t) for t in tensors]).numpy()
  want = [np.sum(t.astype(np.float64) ** 2) for t in tensors]
  np.testing.assert_allclose(got, want, rtol=RTOL)
  sparse = tf.IndexedSlices(tf.constant(tensors[1]), tf.constant([0, 2, 3]), tf.constant([5, 4]))
  np.testing.assert_allclose(backend.norms([sparse]).numpy(), [np.sqrt(want[1])], rtol=RTOL)
  np.testing.assert_allclose(stages.global_norm([tf.constant(t) for t in tensors] + [None]).numpy(),
                             np.sqrt(sum(want)), rtol=RTOL)
  assert backend.squared_norms([]).shape == (0,)


def pipeline_run(monkeypatch, fused_paths, optimizer_name='LARS'):
  """Three steps of optimize_loss with loss scaling, clipping, LARC and LARS (or Momentum)."""
  if not fused_paths:
    monkeypatch.setattr(stages, 'larc', references.larc_reference)
  variables = make_variables()
  targets = [tf.constant(np.full(v.shape, 0.5, np.float32)) for v in variables]

  def loss():
    return tf.add_n([tf.reduce_sum(tf.square(v - t) * (i + 1.0))
                     for i, (v, t) in enumerate(zip(variables, targets))])

  if optimizer_name == 'LARS':
    optimizer = LARSOptimizer(0.5, momentum=0.9, weight_decay=1e-3, eeta=0.01, epsilon=1e-6,
                              skip_list=['batch_normalization', 'bias'], fused=fused_paths)
  elif fused_paths:
    optimizer = KerasMomentum(0.5, momentum=0.9)
  else:
    optimizer = keras.optimizers.SGD(0.5, momentum=0.9)

  @tf.function
  def step():
    return optimize_loss(loss, optimizer, {}, lambda s: 0.5 / (1.0 + tf.cast(s, tf.float32)),
                         var_list=variables, clip_gradients=4.0, loss_scaling=128.0,
                         larc_params={'larc_eta': 0.05, 'larc_mode': 'clip',
                                      'skip_list': ['batch_normalization']})

  for _ in range(3):
    step()
  opt_lib.clear_pipelines()
  return [v.numpy() for v in variables] + momentum_values(optimizer, variables)


@pytest.mark.parametrize('optimizer_name', ['LARS', 'Momentum'])
def test_optimize_loss_fused_matches_reference(monkeypatch, optimizer_name):
  fused_result = pipeline_run(monkeypatch, True, optimizer_name)
  reference_result = pipeline_run(monkeypatch, False, optimizer_name)
  assert_same(fused_result, reference_result)


def fit_weights(optimizer):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 6)).astype(np.float32)
  y = (x @ rng.normal(size=(6, 1))).astype(np.float32)
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation='relu'),
                            keras.layers.BatchNormalization(), keras.layers.Dense(1)])
  model.compile(optimizer=optimizer, loss='mse')
  model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
  return model.get_weights()


def test_model_fit_fused_matches_reference():
  kwargs = dict(momentum=0.9, weight_decay=1e-3, eeta=0.01,
                skip_list=['batch_normalization', 'bias'], use_nesterov=True)
  assert_same(fit_weights(LARSOptimizer(0.1, **kwargs)),
              reference('fit lars', lambda: fit_weights(LARSOptimizer(0.1, fused=False,
                                                                       **kwargs))))
  assert_same(fit_weights(LAMB(0.01, weight_decay=0.01, exclude_from_weight_decay=['bias'])),
              reference('fit lamb', lambda: fit_weights(LAMB(
                  0.01, weight_decay=0.01, exclude_from_weight_decay=['bias'], fused=False))))


def test_fused_flag_round_trips_through_config():
  for optimizer in (LARSOptimizer(0.1, fused=False), LAMB(0.1, fused=False)):
    clone = type(optimizer).from_config(optimizer.get_config())
    assert clone.fused is False
