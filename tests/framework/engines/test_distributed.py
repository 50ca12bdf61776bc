"""Which engine a run uses, from ``distribution`` and the environment (no cluster started)."""

import json
import threading
import re

import pytest

from core.params import ConfigError
from framework.engines import distributed


def tf_config(workers, index=0, chief=0, task='worker'):
  cluster = {'worker': [f'localhost:{2000 + i}' for i in range(workers)]}
  if chief:
    cluster['chief'] = ['localhost:1999']
  return {'TF_CONFIG': json.dumps({'cluster': cluster, 'task': {'type': task, 'index': index}})}


SLURM_2 = {'SLURM_PROCID': '1', 'SLURM_STEP_NUM_TASKS': '2', 'SLURM_STEP_NODELIST': 'n1'}
HOROVODRUN = {'HOROVOD_RANK': '0', 'HOROVOD_SIZE': '2'}


@pytest.mark.parametrize('environ,engine,where', [
    ({}, 'none', 'one process'),
    (HOROVODRUN, 'horovod', 'horovodrun'),
    (tf_config(2), 'multi_worker_mirrored', 'TF_CONFIG'),
    (tf_config(1), 'none', 'one process'),  # a TF_CONFIG of one task: one process
    (SLURM_2, 'multi_worker_mirrored', 'Slurm'),
    (dict(SLURM_2, SLURM_STEP_NUM_TASKS='1'), 'none', 'one process'),
])
def test_auto_follows_the_launcher(environ, engine, where):
  assert distributed.choose_engine('auto', environ) == (engine, where)


def test_a_forced_choice_is_kept_or_refused_in_one_line():
  assert distributed.choose_engine('horovod', {})[0] == 'horovod'  # a one-worker Horovod job
  assert distributed.choose_engine('multi_worker_mirrored', tf_config(1))[0] == \
      'multi_worker_mirrored'
  assert distributed.choose_engine('none', {})[0] == 'none'
  cases = [
      ('multi_worker_mirrored', {}, 'needs a cluster: run with run.py --num_workers=N'),
      ('multi_worker_mirrored', HOROVODRUN, 'but horovodrun started this process'),
      ('none', tf_config(2), 'but TF_CONFIG (2 tasks) started several workers'),
      ('none', SLURM_2, 'but Slurm (2 tasks) started several workers'),
      ('auto', dict(HOROVODRUN, **tf_config(2)), 'both horovodrun and a TF_CONFIG of 2 tasks'),
  ]
  for choice, environ, message in cases:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
      distributed.choose_engine(choice, environ)
    assert '\n' not in str(info.value)


def test_tf_config_ranks_the_chief_first():
  assert distributed.tf_config_cluster(tf_config(2, index=1, chief=1)) == (
      ['localhost:1999', 'localhost:2000', 'localhost:2001'], 2)
  assert distributed.tf_config_cluster(tf_config(2, index=0, chief=1, task='chief'))[1] == 0
  assert distributed.tf_config_cluster({}) is None


@pytest.mark.parametrize('text,message', [
    ('{not json', 'TF_CONFIG: not valid JSON'),
    (json.dumps({'cluster': {'worker': ['a:1', 'a:1']}, 'task': {'type': 'worker', 'index': 0}}),
     'TF_CONFIG: a:1 is named twice'),
    (json.dumps({'cluster': {'worker': ['a:1', 'b:1']}, 'task': {'type': 'worker', 'index': 2}}),
     'is not one of the cluster\'s tasks'),
    (json.dumps({'cluster': {'worker': ['a:1'], 'ps': ['b:1']}, 'task': {'type': 'worker',
                                                                       'index': 0}}),
     r"cluster jobs \['ps'\] are not supported"),
    (json.dumps({'cluster': {'worker': 'a:1'}, 'task': {'type': 'worker', 'index': 0}}),
     'cluster.worker must be a list'),
    # A port past 65535 reached the socket layer as an OverflowError traceback.
    (json.dumps({'cluster': {'worker': ['a:1', 'b:99999']}, 'task': {'type': 'worker', 'index': 0}}),
     r'^TF_CONFIG: cluster.worker.1 is \'b:99999\'; expected "host:port" with a port in 1..65535$'),
    (json.dumps({'cluster': {'worker': ['a', 'b:2']}, 'task': {'type': 'worker', 'index': 0}}),
     r"cluster.worker.0 is 'a'; expected"),
    # JSON's true is no task index (Python counts it as 1, and the worker waited for a worker 0).
    (json.dumps({'cluster': {'worker': ['a:1', 'b:1']}, 'task': {'type': 'worker', 'index': True}}),
     'is not one of the cluster\'s tasks'),
])
def test_a_malformed_tf_config_is_one_line(text, message):
  with pytest.raises(ConfigError, match=message):
    distributed.tf_config_cluster({'TF_CONFIG': text})


class _TwoThreads:
  """Two workers as threads: ``max_host`` a real reduction between them, each wait bounded."""

  def __init__(self):
    self.local = threading.local()
    self.barrier = threading.Barrier(2, timeout=10)
    self.slots = [0, 0]

  def rank(self):
    return self.local.rank

  def max_host(self, value):
    self.slots[self.local.rank] = int(value)
    self.barrier.wait()
    result = max(self.slots)
    self.barrier.wait()
    return result


def test_the_chiefs_view_of_a_file_is_every_workers_decision(monkeypatch):
  """The chief saw no copy (and will make it); worker 1, later, saw the copy made.

  Each deciding by its own look, worker 1 would skip the barrier the chief waits
  in after copying (the hang of a two-worker critical batch on a loaded machine);
  by the chief's view both copy-and-wait or neither does.
  """
  engine = _TwoThreads()
  monkeypatch.setattr(distributed.allreduce, 'rank', engine.rank)
  monkeypatch.setattr(distributed.allreduce, 'max_host', engine.max_host)
  decided = {}

  def worker(rank, own_look, chief_look):
    engine.local.rank = rank
    decided[rank] = distributed.chief_decides(own_look if rank else chief_look)

  for chief_look, late_look in ((True, False), (False, True), (True, True), (False, False)):
    decided.clear()
    threads = [threading.Thread(target=worker, args=(r, late_look, chief_look)) for r in (0, 1)]
    for t in threads:
      t.start()
    for t in threads:
      t.join(30)
    assert decided == {0: int(chief_look), 1: int(chief_look)}, (chief_look, late_look)
