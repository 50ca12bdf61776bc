"""The framing of TFRecord files: checksums, counts, compression, and which file is damaged.

A TFRecord record is framed as ``uint64 length, uint32 masked_crc32c(length),
bytes data[length], uint32 masked_crc32c(data)``, all little-endian; a file
may be GZIP- or ZLIB-compressed as a whole. The ``tfrecord`` data layer
(``data.tfrecord``) counts a split's records and tells the files'
compression with these, in plain Python, before TensorFlow reads them. Once
TensorFlow's reader has failed on a record (its ``DataLossError`` names a
byte offset, not the file), :func:`first_unreadable_record` finds the file.
"""

import concurrent.futures
import gzip
import re
import struct
import zlib

import tensorflow as tf

from data.base import DataError

# The bytes of a compressed file read at once.
CHUNK_BYTES = 8 << 20


def _crc32c_table():
  table = []
  for byte in range(256):
    crc = byte
    for _ in range(8):
      # 0x82F63B78 is the Castagnoli polynomial in reflected bit order.
      crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    table.append(crc)
  return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data):
  """CRC-32C (Castagnoli) of ``data``; only used on 8-byte record headers."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
  """The rotated and offset CRC that TFRecord stores."""
  crc = crc32c(data)
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# TensorFlow's names of the compressions a TFRecord file may have ('': none), by config value.
COMPRESSIONS = {'none': '', 'gzip': 'GZIP', 'zlib': 'ZLIB'}


def file_compression(path):
  """``''`` (an uncompressed TFRecord file), ``'GZIP'`` or ``'ZLIB'``, by the file's first bytes.

  An uncompressed file begins with a record header whose length checksum
  holds; a GZIP one with its magic bytes; a ZLIB stream with a header whose
  16 bits are a multiple of 31. An empty file is uncompressed; a file that is
  none of these gives None (the framing check then names what is wrong).
  """
  opener = tf.io.gfile.GFile if '://' in path else open
  with opener(path, 'rb') as f:
    head = f.read(12)
  if not head:
    return ''
  if len(head) == 12 and masked_crc32c(head[:8]) == struct.unpack('<I', head[8:])[0]:
    return ''
  if head[:2] == b'\x1f\x8b':
    return 'GZIP'
  if len(head) >= 2 and head[0] & 0x0F == 8 and ((head[0] << 8) | head[1]) % 31 == 0:
    return 'ZLIB'
  return None


class _ZlibReader:
  """``read(n)`` of the decompressed bytes of a ZLIB stream read from ``raw``."""

  def __init__(self, raw):
    self._raw = raw
    self._inflate = zlib.decompressobj()
    self._buffer = b''

  def read(self, size):
    while len(self._buffer) < size and not self._inflate.eof:
      chunk = self._raw.read(CHUNK_BYTES)
      if not chunk:
        break
      self._buffer += self._inflate.decompress(chunk)
    out, self._buffer = self._buffer[:size], self._buffer[size:]
    return out


def _count_compressed_records(path, compression):
  """``count_records`` of a GZIP or ZLIB file: its framing walked through the decompressed bytes."""
  opener = tf.io.gfile.GFile if '://' in path else open
  count = position = 0
  try:
    with opener(path, 'rb') as raw:
      stream = gzip.GzipFile(fileobj=raw) if compression == 'GZIP' else _ZlibReader(raw)
      while True:
        header = stream.read(12)
        if not header:
          return count
        if len(header) < 12:
          raise DataError(f'{path}: truncated TFRecord file ({compression}): the header of record '
                          f'{count} at byte {position} of its decompressed bytes is cut off')
        length, length_crc = struct.unpack('<QI', header)
        if masked_crc32c(header[:8]) != length_crc:
          raise DataError(f'{path}: corrupt TFRecord file ({compression}): bad length checksum in '
                          f'record {count} at byte {position} of its decompressed bytes')
        left = length + 4
        while left:
          chunk = len(stream.read(min(left, CHUNK_BYTES)))
          if not chunk:
            raise DataError(f'{path}: truncated TFRecord file ({compression}): record {count} '
                            f'needs {position + 12 + length + 4} decompressed bytes, it has '
                            f'{position + 12 + length + 4 - left}')
          left -= chunk
        position += 12 + length + 4
        count += 1
  except (OSError, EOFError, zlib.error) as e:
    raise DataError(f'{path}: cannot be read as {compression}-compressed ({e})') from None


def count_records(path, compression=''):
  """Walks the record framing of a TFRecord file and returns its number of records.

  Reads only the 12-byte header of each record and checks its CRC, then seeks
  over the payload, so it costs one small read per record; payload CRCs are
  not checked. A compressed file (``compression`` ``'GZIP'`` or ``'ZLIB'``)
  is decompressed on the way, a pass over its bytes.

  Raises:
    DataError: naming the file, when a header is cut off or corrupt, or the
      last record runs past the end of the file.
  """
  if compression:
    return _count_compressed_records(path, compression)
  size = tf.io.gfile.stat(path).length
  opener = tf.io.gfile.GFile if '://' in path else open
  count = position = 0
  with opener(path, 'rb') as f:
    while position < size:
      header = f.read(12)
      if len(header) < 12:
        raise DataError(f'{path}: truncated TFRecord file: the header of record {count} '
                        f'at byte {position} is cut off')
      length, length_crc = struct.unpack('<QI', header)
      if masked_crc32c(header[:8]) != length_crc:
        raise DataError(f'{path}: corrupt TFRecord file: bad length checksum in record {count} '
                        f'at byte {position} (not a TFRecord file, or damaged)')
      position += 12 + length + 4
      if position > size:
        raise DataError(f'{path}: truncated TFRecord file: record {count} needs {position} bytes, '
                        f'the file has {size}')
      f.seek(position)
      count += 1
  return count


def _unreadable(path, compression):
  """``(records read, TensorFlow's reason)`` where TensorFlow's reader fails on ``path``, or None."""
  def count(records):
    return int(records.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))

  records = tf.data.TFRecordDataset(path, compression_type=compression)
  try:
    count(records)
    return None
  except tf.errors.OpError as e:
    # After a failure the reader moves to the next file: what came before the bad record counts.
    read = count(records.ignore_errors())
    reason = re.sub(r'^\{\{function_node [^}]*\}\}\s*', '', e.message.splitlines()[0])
    return read, re.sub(r'\s*\[Op:\w+\].*$', '', reason)


def first_unreadable_record(paths, compression=''):
  """The first file of ``paths`` on which TensorFlow's reader fails, and where.

  Each file is read whole by TensorFlow's reader, which checks both
  checksums of every record (``count_records`` checks the headers only), a
  few files at once; the failing file first in the order of ``paths`` is
  named, and the files after it are left unread.

  Returns:
    ``(path, index of the record that fails, TensorFlow's reason)``, or None
    when every file reads.
  """
  with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
    checks = [pool.submit(_unreadable, path, compression) for path in paths]
    try:
      for path, check in zip(paths, checks):
        found = check.result()
        if found is not None:
          return (path, *found)
    finally:
      for check in checks:
        check.cancel()
  return None
