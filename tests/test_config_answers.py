"""run.py answers --print_config and config mistakes without importing TensorFlow, at once.

``--print_config`` runs run.py in a child process under ``python -X
importtime``, which lists every module the process imports on stderr: the
answer must come with no ``tensorflow``, ``keras`` or ``horovod`` among them
(``TF_CPP_MIN_LOG_LEVEL=0`` keeps run.py from capturing stderr while
TensorFlow loads, which would hide those lines too), and the child's CPU time
(user + system, from ``getrusage``) stays under a second; loading TensorFlow
alone takes several.

The config mistakes share one child process, which calls run.py's ``main``
on each in turn: after each, none of those packages may be among the modules
the process holds (a module once imported stays there, so the first mistake
that loaded one is named), and the answer's CPU time stays under a second.
A child each would add an interpreter's start-up per case and show nothing
more. The last case is one that loads TensorFlow, so the check is seen to
fail when it should.
"""

import json
import os
import resource
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LARS_CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_lars.py')
HEAVY = ('tensorflow', 'keras', 'horovod')
CPU_SECONDS = 1.0


def answer(*args):
  """Runs run.py; returns (exit status, stdout, stderr lines that are not import times, imports, CPU s)."""
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  result = subprocess.run([sys.executable, '-X', 'importtime', os.path.join(ROOT, 'run.py'),
                           '--config', LARS_CONFIG, *args],
                          cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='0'),
                          capture_output=True, text=True, timeout=300, check=False)
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
  lines = result.stderr.splitlines()
  imports = [line.rsplit('|', 1)[-1].strip() for line in lines if line.startswith('import time:')]
  messages = [line for line in lines if line.strip() and not line.startswith('import time:')]
  return result.returncode, result.stdout, messages, imports, cpu


def heavy(imports):
  return sorted({name.split('.')[0] for name in imports if name.split('.')[0] in HEAVY})


# The child of the config mistakes: argv[1] the cases (JSON), argv[2] the file of its answers.
ANSWER_EACH = """
import contextlib, io, json, sys, time
import run
HEAVY = {heavy!r}
answers = []
for args in json.loads(sys.argv[1]):
  out, err = io.StringIO(), io.StringIO()
  start = time.process_time()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      status = run.main(args)
    except SystemExit as exc:
      status = exc.code
  answers.append({{'status': status, 'stderr': err.getvalue(),
                   'cpu': time.process_time() - start,
                   'heavy': sorted({{m.split('.')[0] for m in sys.modules}} & set(HEAVY))}})
with open(sys.argv[2], 'w') as f:
  json.dump(answers, f)
""".format(heavy=HEAVY)


def answers_in_one_child(cases, directory):
  """Runs run.py's ``main`` on each of ``cases`` in one child; returns one dict per case."""
  path = os.path.join(directory, 'answers.json')
  argvs = [['--config', LARS_CONFIG, *args] for args in cases]
  subprocess.run([sys.executable, '-c', ANSWER_EACH, json.dumps(argvs), path], cwd=ROOT,
                 env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                 timeout=300, check=True)
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def test_print_config_answers_without_tensorflow():
  status, stdout, messages, imports, cpu = answer('--print_config')
  # One line besides the config: the update chain the config asks for.
  assert status == 0 and [m.split(':')[0] for m in messages] == ['update chain'], messages
  printed = yaml.safe_load(stdout)
  assert printed['optimizer'] == 'LARS' and printed['data_layer'] == 'fashion_mnist'
  # The listing is read: what the answer imported is there.
  assert 'framework.config.validation' in imports
  assert heavy(imports) == []
  assert cpu < CPU_SECONDS


MISTAKES = [
    (['--set', 'zzyzx=1'], 'error: zzyzx: unknown key; allowed keys: agn_params, '),
    (['--set', 'batch_size_per_gpu=abc'],
     "error: batch_size_per_gpu: expected an integer, got 'abc' (str)"),
    (['--set', 'num_epochs=2h'], "error: num_epochs: expected a number, got '2h' (str)"),
    (['--set', 'max_steps=100', '--set', 'num_epochs=3'],
     'error: num_epochs, max_steps: give exactly one of them, got both'),
    # The data layer declares its size, so the run's length in steps is checked here too.
    (['--set', 'lr_policy_params.warmup_epochs=9'],
     'error: lr_policy_params.warmup_epochs: the warm-up (2106 steps) is longer than training '
     '(1872 steps); shorten it or train longer'),
    (['--set', 'jit_compile=true', '--set', 'summaries=[gradients]'],
     "error: jit_compile: summaries ['gradients'] are written inside the train step, which XLA "
     'cannot compile'),
    (['--set', 'batch_size_per_gpu=65536', '--set', 'lr_scaling=null',
      '--set', 'lr_policy_params.learning_rate=1.0'],
     'error: batch_size_per_gpu: 65536 per worker x 1 worker(s) is larger than the 60000 '
     'examples of the train split'),
    (['--set', 'optimizer=LRAS'], "error: optimizer: unknown optimizer 'LRAS' (did you mean 'LARS'?)"),
    (['--set', 'lr_policy=poly_decai'],
     "error: lr_policy: unknown lr policy 'poly_decai' (did you mean 'poly_decay'?)"),
    (['--set', 'model=resnet_cifr'], "error: model: unknown model 'resnet_cifr' (did you mean"),
    (['--set', 'model_params.dept=8'], 'error: model_params.dept: unknown key (did you mean '
                                       'model_params.depth?)'),
    (['--set', 'data_layer_params.augmnt=true'],
     'error: data_layer_params.augmnt: unknown key (did you mean data_layer_params.augment?)'),
    (['--set', 'lr_policy_params.warmup_epochs=-1'],
     'error: lr_policy_params.warmup_epochs: expected a number >= 0 or a list of them, got -1'),
    (['--set', 'larc_params={larc_mode: clip}'],
     'error: larc_params.larc_eta: required key is missing (trust coefficient eta)'),
    (['--set', 'larc_params={larc_eta: 0.001, larc_mode: cilp}'],
     "error: larc_params.larc_mode: 'cilp' is not allowed (did you mean 'clip'?)"),
    (['--set', 'loss_scaling=Backof'], "error: loss_scaling: 'Backof' is not allowed (did you mean "),
    (['--set', 'precise_bn={num_batches: 0}'], 'error: precise_bn.num_batches: must be > 0, got 0'),
    (['--set', 'horovod_params.compression=fp8'], "error: horovod_params.compression: 'fp8' is not "
                                                  "allowed; allowed: 'none', 'fp16'"),
    (['--set', 'agn_params={optimizer: Momentum}'], 'error: agn_params: only used with optimizer: AGN'),
    (['--set', 'optimizer=AGN', '--set', 'agn_params={optimizer: Momentum, communication_period: 0}'],
     'error: agn_params.communication_period: must be > 0, got 0'),
    (['--set', 'dtype=float64'], "error: dtype: 'float64' is not allowed"),
    (['--set', 'optimizer_params.learning_rate=0.1'],
     'error: optimizer_params.learning_rate: not allowed, the learning rate comes from the lr policy'),
    # Argument names come from the registries' declarations (optimizers/registry.py).
    (['--set', 'optimizer_params.momentun=0.9'],
     'error: optimizer_params.momentun: unknown argument of LARSOptimizer (did you mean '
     'optimizer_params.momentum?); accepted: clipnorm, clipvalue, eeta, ema_momentum, '),
    (['--set', 'optimizer=AGN', '--set', 'agn_params={optimizer: LAMB}'],
     'error: optimizer_params.momentum: unknown argument of LAMB (did you mean '
     'optimizer_params.ema_momentum?); accepted: beta_1, beta_2, '),
    (['--set', 'lr_policy_params.decay_epoch=3'],
     'error: lr_policy_params.decay_epoch: unknown argument of poly_decay (did you mean '
     'lr_policy_params.decay_epochs?); accepted: '),
    (['--set', 'lr_policy=exp_decay'],
     'error: lr_policy_params.power: unknown argument of exp_decay; accepted: '),
    (['--set', 'summaries=[gradient_norms]'],
     "error: summaries.0: 'gradient_norms' is not allowed (did you mean 'gradient_norm'?)"),
    # loss_scaling_params are checked by the loss scalers' own check, which needs no TensorFlow.
    (['--set', 'loss_scaling=Backoff', '--set', 'loss_scaling_params={scale_maxx: 2}'],
     "error: loss_scaling_params.scale_maxx: rejected by loss_scaling 'Backoff': params.scale_maxx: "
     "unknown key for the 'Backoff' algorithm (did you mean params.scale_max?); allowed keys: "
     'scale_max, scale_min, step_factor, step_window'),
    (['--set', 'loss_scaling=Backoff', '--set', 'loss_scaling_params={step_factor: 1}'],
     "error: loss_scaling_params.step_factor: rejected by loss_scaling 'Backoff': step_factor: "
     'must be > 1, got 1'),
    (['--set', 'loss_scaling=backoff', '--set', 'loss_scaling_params={scale_min: 65536}'],
     "error: loss_scaling_params.scale_min: rejected by loss_scaling 'backoff': scale_max: "
     'must be >= scale_min (65536.0), got 16384.0'),
    (['--set', 'loss_scaling=Backoff', '--set', 'loss_scaling_params={step_window: 2.5}'],
     "error: loss_scaling_params.step_window: rejected by loss_scaling 'Backoff': step_window: "
     'expected an integer >= 1, got 2.5'),
    (['--set', 'loss_scaling=LogMax', '--set', 'loss_scaling_params={step_window: 10}'],
     "error: loss_scaling_params.step_window: rejected by loss_scaling 'LogMax': params.step_window: "
     "unknown key for the 'LogMax' algorithm; allowed keys: beta1, beta2, log_max, "
     'overflow_std_dev, scale_max, scale_min'),
    (['--set', 'loss_scaling=LogMax', '--set', 'loss_scaling_params={beta2: 1.5}'],
     "error: loss_scaling_params.beta2: rejected by loss_scaling 'LogMax': beta2: must be < 1.0, "
     'got 1.5'),
    (['--set', 'loss_scaling=LogMax', '--set', 'loss_scaling_params={scale_max: big}'],
     "error: loss_scaling_params.scale_max: rejected by loss_scaling 'LogMax': scale_max: "
     "expected a number, got 'big' (str)"),
    (['--set', 'loss_scaling=dynamic', '--set', 'loss_scaling_params={growth_step: 10}'],
     "error: loss_scaling_params.growth_step: rejected by loss_scaling 'dynamic': "
     'loss_scaling_params.growth_step: unknown key for dynamic loss scaling (did you mean '
     'loss_scaling_params.growth_steps?)'),
    (['--set', 'loss_scaling_params={scale_max: 16}'],
     'error: loss_scaling_params.scale_max: rejected by loss_scaling 1.0: loss_scaling_params: only '
     'used with Backoff, LogMax or dynamic loss scaling'),
]
# A mistake only the optimizer's constructor finds: it loads TensorFlow (the last case).
LOADS_TENSORFLOW = (['--set', 'optimizer_params.momentum=abc'],
                    'error: optimizer_params.momentum: rejected by')


@pytest.fixture(scope='module')
def mistakes(tmp_path_factory):
  """Each case of MISTAKES then LOADS_TENSORFLOW, answered in one child."""
  cases = [['--mode', 'train', *args] for args, _ in MISTAKES + [LOADS_TENSORFLOW]]
  return answers_in_one_child(cases, str(tmp_path_factory.mktemp('answers')))


def one_line(answer_):
  return [line for line in answer_['stderr'].splitlines() if line.strip()]


@pytest.mark.parametrize('case', range(len(MISTAKES)),
                         ids=[message[:60] for _, message in MISTAKES])
def test_config_mistakes_answer_in_one_line_without_tensorflow(mistakes, case):
  answer_, (_, message) = mistakes[case], MISTAKES[case]
  assert answer_['status'] == 2
  messages = one_line(answer_)
  assert len(messages) == 1 and messages[0].startswith(message), messages
  assert answer_['heavy'] == []
  assert answer_['cpu'] < CPU_SECONDS


def test_the_check_sees_tensorflow_when_a_mistake_loads_it(mistakes):
  # The check above can fail: the last case loads TensorFlow, and the child holds it after.
  answer_ = mistakes[-1]
  assert answer_['status'] == 2 and one_line(answer_)[-1].startswith(LOADS_TENSORFLOW[1])
  assert 'tensorflow' in answer_['heavy']
