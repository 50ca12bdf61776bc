"""The report of an evaluation: its line, its split, its scalars, and the run's final line."""

import pytest

from framework.run import evaluation
from framework.run import summaries
from framework.tasks.image_classification import ImageClassificationTask


# --- the lines name the split their numbers come from ------------------------------------

IMAGE_METRICS = {'loss': 0.2345, 'accuracy': 0.9069, 'top5_accuracy': 0.9979, 'examples': 500}


def image_task():
  return ImageClassificationTask({'label_smoothing': 0.0})


@pytest.mark.parametrize('split, suffix', [
    ('test', ' on the test split'), (None, ''), ('validation', ' on the validation split'),
    ('dev', ' on the dev split')])
def test_an_eval_line_names_any_split_it_knows(split, suffix, capsys, monkeypatch):
  written = []
  monkeypatch.setattr(summaries, 'write_eval_metrics', lambda *args: written.append(args))
  evaluation.report(40, IMAGE_METRICS, 'writer', image_task(), split=split)
  assert written == [('writer', 40, IMAGE_METRICS, ('accuracy', 'top5_accuracy', 'loss'))]
  assert capsys.readouterr().out == (
      'eval at step 40: loss 0.2345, top-1 0.9069, top-5 0.9979 (500 examples)' + suffix + '\n')


def test_the_final_line_names_its_split_and_the_step_of_its_numbers():
  task = image_task()
  text = 'accuracy: 0.9069 (top-5 0.9979, loss 0.2345)'
  # The README's line: the last evaluation, on the test split (or a layer that does not say).
  for split in ('test', None):
    assert evaluation.final_line(task, dict(IMAGE_METRICS, step=1872, split=split), 1872) == (
        f'final test {text} at step 1872')
  assert evaluation.final_line(task, IMAGE_METRICS, 1872) == f'final test {text} at step 1872'
  assert evaluation.final_line(task, dict(IMAGE_METRICS, step=60, split='validation'), 60) == (
      f'final validation {text} at step 60')
  # The best checkpoint (chosen on validation) evaluated on another split after training.
  best = dict(IMAGE_METRICS, step=40, split='eval', selected_on='validation')
  assert evaluation.final_line(task, best, 60) == (
      f'final eval {text} at step 40 (best checkpoint by validation accuracy; the run ended at '
      'step 60)')
  assert evaluation.final_line(task, dict(best, step=60), 60) == (
      f'final eval {text} at step 60 (best checkpoint by validation accuracy)')
