"""Declared parameters: paths made absolute, so a run directory's config names the same files anywhere."""

import os

import pytest

from core.params import ConfigError
from core.params import Param
from core.params import PathParam
from core.params import check_params

SCHEMA = {
    'data_dir': PathParam(None),
    'train_files': PathParam(None, relative_to='data_dir'),
    'train_dir': PathParam('~/images'),
    'size': Param(int, 3),
}


def test_relative_paths_are_made_absolute_from_the_working_directory(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  params = check_params({'train_files': 'records/train-*', 'data_dir': None}, SCHEMA, 'p')
  assert params['train_files'] == f'{tmp_path}/records/train-*'
  assert params['train_dir'] == os.path.expanduser('~/images')
  assert params['data_dir'] is None
  # Idempotent: a recorded config checked again from elsewhere names the same files.
  monkeypatch.chdir('/')
  assert check_params(params, SCHEMA, 'p') == params


def test_a_glob_inside_a_given_directory_stays_relative_to_it(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  params = check_params({'data_dir': 'shards', 'train_files': 'train-*'}, SCHEMA, 'p')
  assert params['data_dir'] == f'{tmp_path}/shards'
  assert params['train_files'] == 'train-*'


def test_urls_stay_as_they_are():
  params = check_params({'data_dir': 'gs://bucket/imagenet'}, SCHEMA, 'p')
  assert params['data_dir'] == 'gs://bucket/imagenet'


def test_a_path_must_be_a_string():
  with pytest.raises(ConfigError, match=r'^p.data_dir: expected a string, got 3 \(int\)$'):
    check_params({'data_dir': 3}, SCHEMA, 'p')
