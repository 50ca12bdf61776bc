"""The run's record (framework/run/record.py): JSON lines that a resumed run continues."""

import json
import math

import numpy as np

from framework.run import record


def test_values_are_plain_json_and_non_finite_ones_null():
  assert record.plain(np.float32(0.05)) == 0.05  # the float32's shortest repr, not 0.0500000007
  assert record.plain(np.int64(7)) == 7 and isinstance(record.plain(np.int64(7)), int)
  assert record.plain(np.float32('nan')) is None and record.plain(math.inf) is None
  assert record.plain({'a': [np.float64(0.25), True, None, 'x']}) == {'a': [0.25, True, None, 'x']}
  json.dumps(record.plain({'v': np.float32(-math.inf)}), allow_nan=False)


def test_a_start_drops_what_came_after_its_step_and_the_ending(tmp_path):
  first = record.Record(tmp_path, True, 0)
  first.add('start', 0)
  for step in (10, 20, 30):
    first.add('train', step, loss=np.float32(1.0 / step))
  first.add('eval', 30, metrics={'accuracy': 0.5})
  first.add('end', 30)
  # Resumed from the checkpoint of step 20: step 30's events and the end go.
  again = record.Record(tmp_path, True, 20)
  again.add('start', 20)
  events = record.read(tmp_path)
  assert [(e['kind'], e['step']) for e in events] == [
      ('start', 0), ('train', 10), ('train', 20), ('start', 20)]
  assert events[1]['loss'] == 0.1
  # A stop is the end of an attempt: the next one drops it (a run straight through has none).
  again.add('train', 25)
  again.add('stop', 25, signal='SIGTERM', checkpoint='/run/ckpt-25')
  assert record.last(record.last_attempt(record.read(tmp_path)), 'stop')['step'] == 25
  record.Record(tmp_path, True, 25).add('start', 25)
  events = record.read(tmp_path)
  assert [(e['kind'], e['step']) for e in events] == [
      ('start', 0), ('train', 10), ('train', 20), ('start', 20), ('train', 25), ('start', 25)]
  assert record.last_attempt(events) == events[-1:] and record.last_attempt([]) == []
  # A run resumed at its end trains nothing more but its final evaluation: the end goes too.
  record.Record(tmp_path, True, 20).add('end', 20)
  assert record.last(record.read(tmp_path), 'end')['step'] == 20
  assert [e['kind'] for e in record.read(tmp_path)].count('end') == 1


def test_a_torn_last_line_is_left_out_and_a_worker_writes_nothing(tmp_path):
  writer = record.Record(tmp_path, True, 0)
  writer.add('train', 1, loss=2.0)
  with open(tmp_path / record.RECORD_NAME, 'a', encoding='utf-8') as f:
    f.write('{"kind": "train", "st')  # killed while writing
  assert [e['step'] for e in record.read(tmp_path)] == [1]
  other = tmp_path / 'worker'
  other.mkdir()
  record.Record(other, False, 0).add('train', 1)
  assert not (other / record.RECORD_NAME).exists() and record.read(other) == []
