"""Resolves and validates many variants of one config in one process, building nothing.

  echo '{"config": "configs/fashion_mnist_lars.py", "mode": "train_eval",
         "variants": [["batch_size_per_gpu=256"], ["optimizer=Nope"]]}' \\
      | python -m framework.sweep.check_configs

Reads the request as JSON on stdin: the config file, the run.py mode and, per
variant, its list of ``--set`` overrides. Prints a JSON list with, per variant,
None when run.py would accept it or the one-line error run.py would give.
``scripts/sweep.py`` uses it to check every point of a grid before running
any, paying TensorFlow's start-up once instead of once per point.
"""

import json
import sys


def check(config, mode, variants):
  """The error of each variant, or None; see the module docstring."""
  from framework.engines import tf_import  # pylint: disable=import-outside-toplevel
  tf_import.import_tensorflow()
  from core.params import ConfigError  # pylint: disable=import-outside-toplevel
  from framework.config import config_file  # pylint: disable=import-outside-toplevel
  from framework.config import validation as config_lib  # pylint: disable=import-outside-toplevel
  errors = []
  for overrides in variants:
    try:
      config_lib.load_configs(config, mode, list(overrides))
      errors.append(None)
    except ConfigError as exc:
      errors.append(config_file.format_error(exc))
  return errors


def main():
  request = json.load(sys.stdin)
  print(json.dumps(check(request['config'], request['mode'], request['variants'])))
  return 0


if __name__ == '__main__':
  sys.exit(main())
