"""horovodrun without TensorFlow's start-up lines: Horovod's own launcher, after a quiet import.

  .venv/bin/horovodrun -np 2 --gloo -H localhost:2 .venv/bin/python run.py --config=...

Horovod's launcher checks its build by importing ``horovod.tensorflow`` in
forked children that mute Python's stdout and stderr but not file descriptor
2, where TensorFlow writes its start-up lines, so every launch began with
them. This imports TensorFlow first with those lines held back
(``framework/tf_import.py``); the children then find it loaded and print
nothing. Arguments, output and exit status are horovodrun's own.
scripts/setup.sh makes the environment's ``horovodrun`` run this file.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
  sys.path.insert(0, ROOT)
  from framework import tf_import  # pylint: disable=import-outside-toplevel
  tf_import.import_tensorflow()
  from horovod.runner.launch import run_commandline  # pylint: disable=import-outside-toplevel
  sys.argv[0] = 'horovodrun'
  return run_commandline()


# The guard is needed: Horovod's launcher starts helper processes with 'spawn',
# which import this file again.
if __name__ == '__main__':
  sys.exit(main())
