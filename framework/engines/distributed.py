"""Which multi-worker engine a run uses, its start-up, and the chief's questions.

The collectives themselves (the gradient all-reduce, broadcasts, host sums)
live in ``optimizers.allreduce``, the seam both engines stand behind; this
module picks the engine for a run from its config and its environment, starts
it, and adds what only the framework asks: whether this worker is the chief
that writes files and prints (:func:`log`), and the sums and maxima of host
values the trainer needs (eval metrics, stop requests).

The engine follows ``distribution`` (``auto`` by default):

- ``horovod``: the process was started by ``horovodrun`` (or mpirun);
- ``multi_worker_mirrored``: ``TF_CONFIG`` names more than one task (Kubernetes'
  TFJob, ``run.py --num_workers``, any launcher), or Slurm started more than one
  task (``srun``), read by TensorFlow's own ``SlurmClusterResolver``;
- ``none``: one process.

A choice the environment cannot honour fails in one line naming what is missing.
Everything degrades to the single-process answer when no engine runs.
"""

import errno
import json
import os
import select
import shutil
import signal
import socket
import struct
import threading
import time

from core import signals
from core.params import ConfigError
from core.params import check_params
from framework.engines import console
from framework.engines import start_watch
from framework.engines.local_cluster import slurm_tasks
from framework.engines.schema import DISTRIBUTION_SCHEMA
from optimizers import allreduce

AUTO = 'auto'

CYCLE_TIME_VARIABLE = 'HOROVOD_CYCLE_TIME'
# Horovod's background thread runs a negotiation round, a collective between
# all workers, every HOROVOD_CYCLE_TIME ms (default 1), even when there is
# nothing to reduce; on busy CPU cores those rounds cost training time. The
# Horovod that scripts/build_horovod.sh builds also wakes the thread when a
# tensor is enqueued, so there the cycle only paces idle rounds and a long one
# costs no latency (docs/performance.md has the measurements).
IDLE_CYCLE_TIME_MS = 50

_LAUNCHER_VARIABLES = ('HOROVOD_RANK', 'HOROVOD_SIZE', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK')
_CLUSTER_JOBS = ('chief', 'worker')
# How often a task waiting for its peers polls them (and the longest one probe may take).
POLL_SECONDS = 0.2


class PeersMissing(RuntimeError):
  """Some task of the cluster did not answer within ``distribution_params.timeout_seconds``."""


def launched_by_horovodrun(environ=None):
  """Whether this process was started by horovodrun (or mpirun)."""
  environ = os.environ if environ is None else environ
  return any(v in environ for v in _LAUNCHER_VARIABLES)


def tf_config_cluster(environ=None):
  """The cluster of ``TF_CONFIG``, checked: (addresses in rank order, this task's rank), or None.

  Only the chief and worker jobs train; the chief, when there is one, is rank 0.

  Raises:
    ConfigError: ``TF_CONFIG`` is not JSON, names no task of its cluster, or
      names one address twice.
  """
  tasks = _tf_config_tasks(environ)
  return tasks and tasks[1:]


def _tf_config_tasks(environ=None):
  """(task names, addresses, this task's rank) of ``TF_CONFIG``, or None; see tf_config_cluster."""
  environ = os.environ if environ is None else environ
  text = environ.get('TF_CONFIG', '').strip()
  if not text:
    return None
  try:
    spec = json.loads(text)
  except ValueError as exc:
    raise ConfigError(f'TF_CONFIG: not valid JSON ({exc})') from None
  if not isinstance(spec, dict) or not isinstance(spec.get('cluster', {}), dict):
    raise ConfigError('TF_CONFIG: expected {"cluster": {"worker": [...]}, "task": {"type": '
                      '"worker", "index": i}}')
  cluster = spec.get('cluster') or {}
  if not cluster:
    return None
  names, addresses, seen = [], [], {}
  for job in _CLUSTER_JOBS:
    tasks = cluster.get(job, [])
    if not isinstance(tasks, list) or not all(isinstance(a, str) for a in tasks):
      raise ConfigError(f'TF_CONFIG: cluster.{job} must be a list of "host:port" strings, got '
                        f'{tasks!r}')
    for index, address in enumerate(tasks):
      _check_address(address, f'cluster.{job}.{index}')
      if address in seen:
        raise ConfigError(f'TF_CONFIG: {address} is named twice ({seen[address]} and '
                          f'{job} {index}); every task needs an address of its own')
      seen[address] = f'{job} {index}'
      names.append(seen[address])
      addresses.append(address)
  others = sorted(set(cluster) - set(_CLUSTER_JOBS))
  if others:
    raise ConfigError(f'TF_CONFIG: cluster jobs {others} are not supported; multi-worker '
                      f'training uses {list(_CLUSTER_JOBS)}')
  task = spec.get('task') or {}
  job, index = task.get('type'), task.get('index')
  tasks = cluster.get(job) if job in _CLUSTER_JOBS else None
  if (tasks is None or isinstance(index, bool) or not isinstance(index, int)
      or not 0 <= index < len(tasks)):
    raise ConfigError(f'TF_CONFIG: task {task!r} is not one of the cluster\'s tasks '
                      f'({", ".join(f"{j} 0..{len(cluster[j]) - 1}" for j in _CLUSTER_JOBS if cluster.get(j))})')
  offset = len(cluster.get('chief', [])) if job == 'worker' else 0
  return names, addresses, offset + index


def _resolver_tasks(resolver):
  """(task names, addresses, this task's rank) of a cluster resolver's spec (Slurm)."""
  spec = resolver.cluster_spec().as_dict()
  names, addresses, own = [], [], None
  for job in _CLUSTER_JOBS:
    tasks = spec.get(job, [])
    if isinstance(tasks, dict):  # {index: address}
      tasks = [tasks[i] for i in sorted(tasks)]
    for index, address in enumerate(tasks):
      if job == resolver.task_type and index == resolver.task_id:
        own = len(addresses)
      names.append(f'{job} {index}')
      addresses.append(address)
  return names, addresses, own


def _check_address(address, where):
  """Refuses a cluster address that is not ``host:port`` with a port in 1..65535."""
  host, colon, port = address.rpartition(':')
  if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ConfigError(f'TF_CONFIG: {where} is {address!r}; expected "host:port" with a port in '
                      '1..65535')


def choose_engine(choice, environ=None):
  """The engine a run uses: ``choice`` ('auto', ...) resolved against the environment.

  Returns:
    (engine, where): the engine name and what selected it, in words.

  Raises:
    ConfigError: a choice the environment cannot honour, in one line.
  """
  environ = os.environ if environ is None else environ
  horovodrun = launched_by_horovodrun(environ)
  cluster = tf_config_cluster(environ)
  tf_config_workers = len(cluster[0]) if cluster else 0
  slurm = slurm_tasks(environ)
  if choice == AUTO:
    if horovodrun and tf_config_workers > 1:
      raise ConfigError('distribution: auto, but both horovodrun and a TF_CONFIG of '
                        f'{tf_config_workers} tasks are in the environment; set distribution: '
                        'horovod or multi_worker_mirrored')
    if horovodrun:
      return allreduce.HOROVOD, 'horovodrun'
    if tf_config_workers > 1:
      return allreduce.MULTI_WORKER_MIRRORED, 'TF_CONFIG'
    if slurm > 1:
      return allreduce.MULTI_WORKER_MIRRORED, 'Slurm'
    return allreduce.NONE, 'one process'
  if choice == allreduce.HOROVOD:
    return allreduce.HOROVOD, 'horovodrun' if horovodrun else 'distribution: horovod'
  if choice == allreduce.MULTI_WORKER_MIRRORED:
    if horovodrun:
      raise ConfigError('distribution: multi_worker_mirrored, but horovodrun started this '
                        'process; launch with TF_CONFIG, srun or run.py --num_workers instead, '
                        'or set distribution: horovod')
    if tf_config_workers:
      return allreduce.MULTI_WORKER_MIRRORED, 'TF_CONFIG'
    if slurm:
      return allreduce.MULTI_WORKER_MIRRORED, 'Slurm'
    raise ConfigError('distribution: multi_worker_mirrored needs a cluster: run with '
                      'run.py --num_workers=N, set TF_CONFIG, or launch with srun')
  # none
  if horovodrun or tf_config_workers > 1 or slurm > 1:
    launcher = ('horovodrun' if horovodrun else
                f'TF_CONFIG ({tf_config_workers} tasks)' if tf_config_workers > 1 else
                f'Slurm ({slurm} tasks)')
    raise ConfigError(f'distribution: none, but {launcher} started several workers; they would '
                      'train apart and write one logdir; set distribution: auto')
  return allreduce.NONE, 'distribution: none'


def _listen_on_own_port(address, where):
  """A listening socket on this task's port (every interface), or a one-line ConfigError.

  TensorFlow's server takes the port over once the rendezvous is done; a port
  that is in use would stop it later with a less clear message.
  """
  port = int(address.rpartition(':')[2])
  # IPv4 and IPv6 at once where the machine has both, as TensorFlow's server listens.
  families = [socket.AF_INET6] if socket.has_dualstack_ipv6() else []
  for family in families + [socket.AF_INET]:
    try:
      # create_server sets SO_REUSEADDR, as TensorFlow's server does.
      return socket.create_server(('', port), family=family, backlog=64,
                                  dualstack_ipv6=family == socket.AF_INET6)
    except OSError as exc:
      if exc.errno == errno.EADDRINUSE or family == socket.AF_INET:
        # create_server's own message repeats the address: the OS's words alone.
        cause = os.strerror(exc.errno) if exc.errno else str(exc)
        hint = ' (distribution_params.port_base)' if where == 'Slurm' else ''
        raise ConfigError(f'{where}: this task\'s address {address} cannot be used: port {port} '
                          f'is in use on this machine ({cause}); choose a free '
                          f'port{hint}') from None
  raise AssertionError('unreachable')  # the last family raises


def _answers(address, timeout):
  """Whether ``host:port`` accepts a TCP connection within ``timeout`` seconds."""
  host, _, port = address.rpartition(':')
  try:
    with socket.create_connection((host.strip('[]'), int(port)), timeout=timeout) as conn:
      # Closed at once with a reset: no TIME_WAIT is left on either side of the port.
      conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
    return True
  except OSError:  # refused, unreachable, a name not known yet (a pod not yet started)
    return False


def rendezvous(names, addresses, own, timeout_seconds, where):
  """Waits, in Python, until every other task of the cluster answers on its address.

  TensorFlow's own start-up waits for the cluster in native code that holds the
  interpreter, where neither a deadline nor a signal handler can run: a peer
  that never comes would hang it for ever. So each task first listens on its
  own port and polls its peers' (their listener, or their TensorFlow server
  when they are past this wait) until all answer; then it closes its listener
  and TensorFlow starts. A stop signal meanwhile raises
  ``core.signals.StartupStopped``.

  Args:
    names: the tasks' names in rank order ('worker 0', 'chief 0', ...).
    addresses: their ``host:port``.
    own: this task's rank.
    timeout_seconds: how long to wait for the peers; None: for ever.
    where: what named the cluster ('TF_CONFIG', 'Slurm'), for the messages.

  Raises:
    ConfigError: this task's port is in use.
    PeersMissing: some peer did not answer within ``timeout_seconds``.
  """
  pending = [i for i in range(len(addresses)) if i != own]
  if not pending:
    return
  start = time.monotonic()
  with signals.stop_raises(f'while waiting for the workers of {where}'):
    listener = _listen_on_own_port(addresses[own], where)
    try:
      while pending:
        pending = [i for i in pending if not _answers(addresses[i], POLL_SECONDS)]
        waited = time.monotonic() - start
        if pending and timeout_seconds is not None and waited >= timeout_seconds:
          missing = ', '.join(f'{names[i]} ({addresses[i]})' for i in pending)
          raise PeersMissing(
              f'{where}: {missing} did not answer within {timeout_seconds:g} s; start every task '
              f'of the cluster, check their addresses, or raise '
              f'distribution_params.timeout_seconds; no step had run, nothing was lost')
        # Peers' probes are accepted and dropped while this task waits for the rest.
        while select.select([listener], [], [], POLL_SECONDS if pending else 0)[0]:
          conn, _ = listener.accept()
          conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
          conn.close()
    finally:
      listener.close()


def _slurm_resolver(params):
  """The cluster of this Slurm job step, as TensorFlow's ``SlurmClusterResolver`` reads it.

  On nodes without GPUs the resolver is given one placeholder device per task
  (its task placement divides GPUs among tasks and fails on zero) and its
  cluster is then handed on without accelerators, so the workers run on CPUs.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  resolvers = tf.distribute.cluster_resolver
  gpus = shutil.which('nvidia-smi') is not None or bool(os.environ.get('CUDA_VISIBLE_DEVICES'))
  try:
    if gpus:
      return resolvers.SlurmClusterResolver(port_base=params['port_base'])
    tasks = slurm_tasks()
    slurm = resolvers.SlurmClusterResolver(port_base=params['port_base'], gpus_per_node=tasks,
                                           gpus_per_task=1, auto_set_gpu=False)
    spec = slurm.cluster_spec()
    return resolvers.SimpleClusterResolver(spec, task_type=slurm.task_type,
                                           task_id=slurm.task_id, num_accelerators={},
                                           rpc_layer=slurm.rpc_layer)
  except (RuntimeError, KeyError, ValueError, OSError, AssertionError) as exc:
    raise ConfigError(f'Slurm: cannot resolve the cluster of this job step ({exc}); '
                      'SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST and '
                      'SLURM_STEP_TASKS_PER_NODE are read') from None


def start(choice=AUTO, params=None, environ=None):
  """Starts the engine of a run (before any other TensorFlow op); returns its name.

  Args:
    choice: the config's ``distribution``.
    params: the config's ``distribution_params`` (timeout_seconds, implementation,
      port_base); None: their defaults.

  Raises:
    ConfigError: a choice the environment cannot honour, a bad TF_CONFIG or a
      port in use, in one line.
    RuntimeError: Horovod is missing or the cluster cannot start.
  """
  environ = os.environ if environ is None else environ
  if params is None:
    params = check_params({}, DISTRIBUTION_SCHEMA, 'distribution_params')
  engine, where = choose_engine(choice, environ)
  if engine == allreduce.HOROVOD:
    start_horovod()
  elif engine == allreduce.MULTI_WORKER_MIRRORED:
    resolver = None
    if where == 'TF_CONFIG':
      names, addresses, own = _tf_config_tasks(environ)
    else:
      resolver = _slurm_resolver(params)
      names, addresses, own = _resolver_tasks(resolver)
    if own is not None:
      rendezvous(names, addresses, own, params['timeout_seconds'], where)
    handlers = _python_handlers()
    timeout = params['timeout_seconds']
    try:
      with start_watch.StartWatchdog(timeout, _start_overdue_line(where, timeout)):
        start_collective(resolver, timeout_seconds=timeout,
                         implementation=params['implementation'])
    except Exception as exc:  # TensorFlow's errors from the cluster start-up
      raise RuntimeError(f'{where}: the multi-worker cluster could not start '
                         f'({" ".join(str(exc).split())[:300]})') from None
    finally:
      # TensorFlow's start-up installs a native SIGTERM handler of its own (its
      # preemption notifier), which would swallow the signal: Python's go back.
      for signum, handler in handlers.items():
        signal.signal(signum, handler)
    if handlers:
      from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel
      start_watch.forward_taken_sigterm(context.context().get_config_key_value)
  return engine


def import_horovod():
  """Imports horovod.tensorflow, with a one-line error naming the fix when it is missing."""
  try:
    import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
  except ImportError as exc:
    raise RuntimeError('Horovod is not installed in this environment: run `bash scripts/setup.sh` '
                       '(or scripts/build_horovod.sh), which builds horovod==0.28.1 with gloo '
                       f'({exc}); or use distribution: multi_worker_mirrored, which needs no '
                       'build') from None
  return hvd


def wakes_on_enqueue():
  """Whether this Horovod build wakes its background thread on enqueue (build_horovod.sh)."""
  from horovod.tensorflow.mpi_ops import _basics  # pylint: disable=import-outside-toplevel
  return hasattr(_basics.MPI_LIB_CTYPES, 'horovod_wakes_on_enqueue')


def start_horovod():
  """Starts Horovod once, as the process's engine (``allreduce.use_horovod``); returns the module.

  With a Horovod that wakes on enqueue and no HOROVOD_CYCLE_TIME in the
  environment, the cycle is set to IDLE_CYCLE_TIME_MS first.

  Raises:
    RuntimeError: Horovod is missing, or another engine is running.
  """
  if allreduce.engine_name() == allreduce.HOROVOD:
    return allreduce.horovod()
  if allreduce.engine_name() != allreduce.NONE:
    raise RuntimeError(f'the {allreduce.engine_name()} engine is running; Horovod cannot start '
                       'beside it')
  hvd = import_horovod()
  if CYCLE_TIME_VARIABLE not in os.environ and wakes_on_enqueue():
    os.environ[CYCLE_TIME_VARIABLE] = str(IDLE_CYCLE_TIME_MS)
  hvd.init()
  return allreduce.use_horovod(hvd)


def start_collective(cluster_resolver=None, timeout_seconds=600, implementation='auto'):
  """Starts the ``multi_worker_mirrored`` engine once; returns its strategy.

  It must run before any other TensorFlow op of the process (TensorFlow
  configures its collectives at start-up).

  Args:
    cluster_resolver: a ``tf.distribute.cluster_resolver.ClusterResolver``;
      None reads ``TF_CONFIG``.
    timeout_seconds: how long one collective waits for its peers before it
      fails (and the run with it) instead of hanging on a dead one; None waits
      for ever (``distribution_params.timeout_seconds``, 600 s by default:
      a peer may be saving a checkpoint or tracing the step meanwhile).
    implementation: 'auto' (NCCL on GPUs, RING otherwise), 'ring' or 'nccl'.

  Raises:
    RuntimeError: Horovod is running already.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  if allreduce.engine_name() == allreduce.MULTI_WORKER_MIRRORED:
    return allreduce.use_collective(None, None)
  if allreduce.engine_name() != allreduce.NONE:
    raise RuntimeError(f'the {allreduce.engine_name()} engine is running; '
                       'multi_worker_mirrored cannot start beside it')
  kinds = tf.distribute.experimental.CommunicationImplementation
  chosen = {'auto': kinds.AUTO, 'ring': kinds.RING, 'nccl': kinds.NCCL}[implementation]
  if chosen == kinds.AUTO and not tf.config.list_physical_devices('GPU'):
    chosen = kinds.RING
  options = tf.distribute.experimental.CommunicationOptions(
      implementation=chosen, timeout_seconds=timeout_seconds)
  strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=cluster_resolver,
                                                       communication_options=options)
  return allreduce.use_collective(strategy, 'NCCL' if chosen == kinds.NCCL else 'RING')


def _start_overdue_line(where, timeout):
  return (f'error: {where}: TensorFlow\'s start-up of the cluster did not finish within '
          f'{timeout:g} s after every worker had answered (a worker died during it, or the '
          'workers cannot reach each other\'s TensorFlow servers); this worker is ended with '
          'SIGKILL; no step had run, nothing was lost') if timeout is not None else ''


def _python_handlers():
  """The stop signals' handlers as Python set them, to put back (main thread only)."""
  if threading.current_thread() is not threading.main_thread():
    return {}
  return {s: h for s in signals.STOP_SIGNALS if (h := signal.getsignal(s)) is not None}


def is_chief():
  return allreduce.rank() == 0


def log(message):
  """Prints one line on the chief's console (above its progress bar); other workers are quiet."""
  if is_chief():
    console.say(message)


def sum_array(values):
  """The element-wise sum of a numpy array over workers (float64)."""
  return allreduce.sum_host(values)


def max_over_workers(value):
  """The largest of an integer over all workers (one small collective when there are several)."""
  return allreduce.max_host(value)


def chief_decides(value):
  """The chief's non-negative integer (or bool) on every worker (one collective all make).

  For a decision read from the run directory, which the chief writes: a worker
  that reads it later may see what the chief has written since, decide the
  other way and skip a collective the chief makes, and both wait for ever.
  """
  return int(allreduce.max_host(int(value) if is_chief() else 0))
