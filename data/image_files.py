"""A folder of image files as a classification split, without TensorFlow.

The ``image_folder`` data layer reads a tree ``root/<class>/<files>``; this
module lists it, holds out its validation files and reads image sizes from
file headers, in plain Python, so that the config layer can count the
training split (``data.image_folder_facts.train_examples``) before
TensorFlow is loaded, and the layer and the count always agree.

Listing rules: the classes are the non-hidden folders directly under the
root, sorted (a label is the index of its folder); a class holds every
non-hidden file below its folder (subfolders included, hidden folders
skipped) whose name ends in ``.jpg``, ``.jpeg``, ``.png``, ``.bmp`` or
``.gif`` (any case); other files are ignored. Files are ordered by their path
relative to the root, so the order never depends on the file system.
Symbolic links are followed to files and to folders outside the tree; a link
that leads back into the tree (a loop, or another class's folder) and a
second link to a file already read are skipped, so every image is read once,
with the label of its own class folder. A class folder that is itself such a
link is refused: its class would hold another class's images, or all of them.

The validation split is chosen per class by a hash of ``split_seed`` and the
file's relative path: each class holds out its ``round(fraction * n)`` files
of smallest hash (at most ``n - 1``), so the choice does not depend on the
listing order, the location of the root or the other files, and every mode
and worker holds out the same files.
"""

import hashlib
import os
import struct

EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.gif')
FORMATS = 'JPEG, PNG, BMP or GIF'
# Files whose headers are read to infer the image size (all of them up to this
# many, else an even sample of this many).
SIZE_SAMPLE = 2000


class FolderError(ValueError):
  """The tree is missing, empty or malformed; the message is one line naming the directory."""


def is_hidden(name):
  return name.startswith('.')


def is_image_name(name):
  return not is_hidden(name) and name.lower().endswith(EXTENSIONS)


def class_folders(root, what='train_dir'):
  """The sorted class folder names directly under ``root``.

  Raises:
    FolderError: when ``root`` is not a directory or holds no class folder.
  """
  if not os.path.isdir(root):
    raise FolderError(f'image_folder: {what} {root} does not exist or is not a directory')
  names = sorted(entry.name for entry in os.scandir(root)
                 if entry.is_dir() and not is_hidden(entry.name))
  if not names:
    raise FolderError(f'image_folder: {what} {root} holds no class folder; expected '
                      f'{what}/<class>/<image files>')
  return names


def _inside(path, directory):
  """Whether the real path ``path`` is ``directory`` or below it (both real paths)."""
  return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _image_files(folder, tree, skipped):
  """The image files below ``folder``: ``(path relative to it, real path, reached by a link)``.

  A link to a folder is followed only where the folder does not lead back
  into ``tree`` (the real path of the root: the folder is in the tree, or
  holds it) and was not reached before; the others go to ``skipped`` as
  ``(path, real path)``. Sorted by relative path.
  """
  found, visited = [], set()
  for directory, subdirs, files in os.walk(folder, followlinks=True):
    real_directory = os.path.realpath(directory)
    visited.add(real_directory)
    kept = []
    for name in subdirs:
      path = os.path.join(directory, name)
      if is_hidden(name):
        continue
      if os.path.islink(path):
        target = os.path.realpath(path)
        if _inside(target, tree) or _inside(tree, target) or target in visited:
          skipped.append((path, target))
          continue
        visited.add(target)
      kept.append(name)
    subdirs[:] = kept
    relative = os.path.relpath(directory, folder)
    linked_directory = not _inside(real_directory, tree)
    for name in files:
      if is_image_name(name):
        path = os.path.join(directory, name)
        linked = os.path.islink(path)
        real = os.path.realpath(path) if linked else os.path.join(real_directory, name)
        found.append((name if relative == '.' else os.path.join(relative, name), real,
                      linked or linked_directory))
  return sorted(found)


def describe_skipped(skipped, root, what='train_dir'):
  """The one line that names the links a listing of ``root`` skipped (``list_tree``'s ``skipped``)."""
  shown = ', '.join(f'{os.path.relpath(path, root)} -> {target}' for path, target in skipped[:3])
  more = f' and {len(skipped) - 3} more' if len(skipped) > 3 else ''
  return (f'image_folder: {what} {root}: skipped {len(skipped)} link(s) that lead back into the '
          f'tree or to a file read already ({shown}{more}); each image is read once, under its '
          'own class folder')


def _check_class_link(root, name, tree, what):
  """Refuses a class folder that is a link back into the tree (``tree``: its real path).

  Its images would be read again under its label: another class's
  (``ln -s alpha train/beta``), or every class's (a link to the tree itself
  or above it, a loop). A link to a folder outside the tree is a class like
  any other.

  Raises:
    FolderError: one line naming the link, where it leads and what to do.
  """
  folder = os.path.join(root, name)
  if not os.path.islink(folder):
    return
  target = os.path.realpath(folder)
  if _inside(tree, target):
    where, whose = 'the tree itself or a folder above it (a loop)', 'every image of the tree'
  elif _inside(target, tree):
    where, whose = 'a folder inside the tree', 'its images'
  else:
    return
  raise FolderError(f'image_folder: {what} {root}: class folder {name} is a link to {target}, '
                    f'{where}: {whose} would be read again as class {name}; make it a folder of '
                    'its own images (or a link to one outside the tree), or remove it')


def list_tree(root, classes=None, what='train_dir', skipped=None):
  """Lists ``root/<class>/<files>``.

  Links are followed to files, and to folders that do not lead back into the
  tree; a link to a folder of the tree or above it (a loop, or another class's
  images under this class) and a linked file that is read already are skipped,
  and a class folder that is such a link is refused.

  Args:
    root: the directory.
    classes: the class folder names (sorted) to read; None: those of ``root``.
    what: the param naming ``root``, for messages.
    skipped: a list that receives ``(path, real path)`` of each link skipped
      (``describe_skipped`` says them in one line).

  Returns:
    ``(class_names, files)``: the sorted class folder names, and a list of
    ``(relative path, label)`` sorted by relative path (``class/.../file``).

  Raises:
    FolderError: for a missing directory, no class folder, a class folder
      without image files, or one that is a link back into the tree.
  """
  if classes is None:
    classes = class_folders(root, what)
  tree = os.path.realpath(root)
  skipped = [] if skipped is None else skipped
  listed = []
  for label, name in enumerate(classes):
    _check_class_link(root, name, tree, what)
    found = _image_files(os.path.join(root, name), tree, skipped)
    if not found:
      raise FolderError(f'image_folder: class folder {os.path.join(root, name)} holds no '
                        f'{FORMATS} file (by extension: {", ".join(EXTENSIONS)})')
    listed.extend((os.path.join(name, path), real, linked, label)
                  for path, real, linked in found)
  # A file is read once: in its own place, else where a link reaches it first.
  seen = {real for _, real, linked, _ in listed if not linked}
  files = []
  for path, real, linked, label in listed:
    if linked:
      if real in seen:
        skipped.append((os.path.join(root, path), real))
        continue
      seen.add(real)
    files.append((path, label))
  return tuple(classes), files


def large_image_line(sizes, channels, target, limit, files):
  """The note of the largest image of ``sizes`` when it decodes to more than ``limit`` bytes.

  Args:
    sizes: ``{(height, width): path}`` of the headers read (``common_image_size``).
    channels: the channels each image is decoded to.
    target: ``(height, width)`` the images are resized to.
    limit: bytes.
    files: how many files the headers were read from; over ``SIZE_SAMPLE``
      they were a sample, and the note says so (a larger image may be unread).

  Returns:
    One line, or None.
  """
  if not sizes:
    return None
  (height, width), path = max(sizes.items(), key=lambda item: item[0][0] * item[0][1])
  decoded = height * width * channels
  if decoded <= limit:
    return None
  sampled = (f'; the largest of {SIZE_SAMPLE:,} headers sampled from its {files:,} training files'
             if files > SIZE_SAMPLE else '')
  return (f'image_folder: train_dir holds images up to {height}x{width} ({path}{sampled}), '
          f'{decoded / 2 ** 20:,.0f} MB decoded: each is decoded whole, a few at once, before it '
          f'is resized to {target[0]}x{target[1]}; resize the files beforehand for less memory '
          'and faster steps')


def file_hash(relative_path, split_seed):
  """The stable number that orders a file for the validation split."""
  text = f'{split_seed}/{relative_path.replace(os.sep, "/")}'.encode('utf-8')
  return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), 'big')


def split_files(files, fraction, split_seed):
  """Splits ``files`` (``(relative path, label)``) into training and validation files.

  Each class holds out ``min(round(fraction * n), n - 1)`` of its ``n`` files,
  those of smallest :func:`file_hash`. Both lists keep the order of ``files``.

  Returns:
    ``(train, validation)``.
  """
  if not fraction:
    return list(files), []
  by_class = {}
  for path, label in files:
    by_class.setdefault(label, []).append(path)
  held_out = set()
  for paths in by_class.values():
    count = min(int(round(fraction * len(paths))), len(paths) - 1)
    ranked = sorted(paths, key=lambda p: (file_hash(p, split_seed), p))
    held_out.update(ranked[:count])
  train = [f for f in files if f[0] not in held_out]
  validation = [f for f in files if f[0] in held_out]
  return train, validation


def train_split(params):
  """``(class_names, training files)`` of an ``image_folder`` params dict (validation removed)."""
  classes, files = list_tree(params['train_dir'])
  train, _ = split_files(files, params['validation_fraction'], params['split_seed'])
  return classes, train


# --- image sizes from headers ---------------------------------------------------------------

# JPEG start-of-frame markers (they hold the size): C0-CF but DHT (C4), JPG (C8) and DAC (CC).
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers without a length field: TEM, RST0-7, SOI, EOI.
_STANDALONE_MARKERS = frozenset([0x01, *range(0xD0, 0xDA)])


def _jpeg_size(f):
  f.seek(2)
  while True:
    byte = f.read(1)
    if not byte:
      return None
    if byte != b'\xff':
      continue  # not at a marker: tolerate garbage between segments
    marker = f.read(1)
    while marker == b'\xff':  # fill bytes
      marker = f.read(1)
    if not marker:
      return None
    code = marker[0]
    if code in _STANDALONE_MARKERS or code == 0x00:
      continue
    length_bytes = f.read(2)
    if len(length_bytes) < 2:
      return None
    length = struct.unpack('>H', length_bytes)[0]
    if code in _SOF_MARKERS:
      data = f.read(5)
      if len(data) < 5:
        return None
      height, width = struct.unpack('>HH', data[1:5])
      return (height, width) if height and width else None
    if length < 2:
      return None
    f.seek(length - 2, os.SEEK_CUR)


def image_size_of(path):
  """``(height, width)`` of a JPEG, PNG, BMP or GIF file from its header (by content), or None.

  None when the file cannot be read or its header is not one of those formats.
  A GIF gives its logical screen, the size TensorFlow decodes its frames to.
  """
  try:
    with open(path, 'rb') as f:
      head = f.read(26)
      if head.startswith(b'\x89PNG\r\n\x1a\n') and head[12:16] == b'IHDR':
        width, height = struct.unpack('>II', head[16:24])
        return height, width
      if head[:6] in (b'GIF87a', b'GIF89a') and len(head) >= 10:
        width, height = struct.unpack('<HH', head[6:10])
        return height, width
      if head[:2] == b'BM' and len(head) >= 26:
        if struct.unpack('<I', head[14:18])[0] == 12:  # OS/2 BITMAPCOREHEADER
          width, height = struct.unpack('<HH', head[18:22])
        else:
          width, height = struct.unpack('<ii', head[18:26])
        return abs(height), abs(width)  # a negative height is a top-down bitmap
      if head[:2] == b'\xff\xd8':
        return _jpeg_size(f)
  except (OSError, struct.error):
    return None
  return None


def common_image_size(paths):
  """The ``(height, width)`` all readable headers of a sample of ``paths`` agree on.

  Reads every header when there are at most ``SIZE_SAMPLE`` files, else an
  even sample of that many.

  Returns:
    ``(size or None, sizes)``: the common size (None when the headers
    disagree or none could be read) and a dict ``size -> first path`` of the
    sizes seen.
  """
  if len(paths) > SIZE_SAMPLE:
    step = len(paths) / SIZE_SAMPLE
    paths = [paths[int(i * step)] for i in range(SIZE_SAMPLE)]
  sizes = {}
  for path in paths:
    size = image_size_of(path)
    if size is not None:
      sizes.setdefault(size, path)
  return (next(iter(sizes)) if len(sizes) == 1 else None), sizes
