"""horovodrun without TensorFlow's start-up lines: Horovod's own launcher, after a quiet import.

  .venv/bin/horovodrun -np 2 --gloo -H localhost:2 .venv/bin/python run.py --config=...

Horovod's launcher checks its build by importing ``horovod.tensorflow`` in
forked children that mute Python's stdout and stderr but not file descriptor
2, where TensorFlow writes its start-up lines, so every launch began with
them. This imports TensorFlow first with those lines held back
(``framework/engines/tf_import.py``); the children then find it loaded and print
nothing. Arguments and output are horovodrun's own. A stop signal (SIGTERM,
SIGINT) gives every worker up to a minute to save and exit, and a job so
stopped exits 128 + the signal (framework/engines/horovod_launcher.py says why).
scripts/setup.sh makes the environment's ``horovodrun`` run this file.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# pylint: disable=wrong-import-position
from framework.engines import horovod_launcher

# Horovod starts each worker's middleman with multiprocessing's 'spawn', which
# imports this file again in the middleman before it runs: this line is what
# gives the middleman the stop of framework/engines/horovod_launcher.py.
horovod_launcher.patch_middleman()


def main():
  from framework.engines import tf_import  # pylint: disable=import-outside-toplevel
  tf_import.import_tensorflow()
  sys.argv[0] = 'horovodrun'
  return horovod_launcher.run()


# The guard is needed: the middlemen import this file again and must not launch.
if __name__ == '__main__':
  sys.exit(main())
