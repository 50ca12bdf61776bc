"""The pieces of scripts/bench_seq2seq.py's micro-batch sweep (``--batches``, ``--dtypes``): its rows and its table.

Which rows a sweep measures and in which order each round runs them, the
padding waste of a size's batches as one pass and as chunks see them, and
the words/sec, ratios and dtype comparisons of the measured rows as text.
The measuring itself (a child process per row) is in bench_seq2seq.py.
"""

import numpy as np

from data import sequences

REFERENCE_BATCH = 1024  # the size the sweep's ratios are to


def chunked_padding_waste(batches, chunk_size):
  """The padding waste of ``batches`` as chunks of ``chunk_size`` rows see them (None: whole batches).

  Each chunk loses the columns that are padding in all its rows, as
  ``models.sequence_losses.teacher_forced_loss`` cuts it.
  """
  def chunks():
    for batch in batches:
      rows = len(batch['source'])
      size = chunk_size or rows
      for start in range(0, rows, size):
        yield {key: _trimmed(batch[key][start:start + size]) for key in ('source', 'target')}

  return sequences.batch_padding_waste(chunks(), sequences.Vocabulary.PAD)


def _trimmed(ids):
  used = np.flatnonzero((ids != sequences.Vocabulary.PAD).any(axis=0))
  return ids[:, :max(int(used[-1]) + 1 if len(used) else 0, 1)]


def measurements(sizes, dtypes, one_pass, chunk_size):
  """The sweep's rows: dicts of ``batch``, ``dtype`` and ``chunked`` (False: one pass).

  A size of at most ``chunk_size`` runs in one pass anyway, so it has one row;
  a larger one also a row in one pass when ``one_pass`` is ``'all'`` or lists it.
  """
  rows = []
  for dtype in dtypes:
    for size in sizes:
      chunked = bool(chunk_size) and size > chunk_size
      rows.append({'batch': size, 'dtype': dtype, 'chunked': chunked})
      if chunked and (one_pass == 'all' or size in (one_pass or ())):
        rows.append({'batch': size, 'dtype': dtype, 'chunked': False})
  return rows


def rotated(rows, round_index):
  """``rows`` started ``round_index`` places later, so no row is always first or last."""
  shift = round_index % len(rows) if rows else 0
  return rows[shift:] + rows[:shift]


def summarize(rows, results):
  """Per row: words/sec over all rounds, its rounds' spread, steps, peak bytes, or the error."""
  table = []
  for row, runs in zip(rows, results):
    errors = [r['error'] for r in runs if 'error' in r]
    if errors:
      table.append({**row, 'error': errors[0]})
      continue
    rates = [r['words'] / r['seconds'] for r in runs]
    table.append({**row, 'words_per_sec': sum(r['words'] for r in runs)
                  / sum(r['seconds'] for r in runs),
                  'cpu_words_per_sec': sum(r['words'] for r in runs)
                  / sum(r['cpu_seconds'] for r in runs),
                  'spread': (min(rates), max(rates)), 'steps': sum(r['steps'] for r in runs),
                  'peak_bytes': max(r['peak_bytes'] for r in runs)})
  return table


def ratio_to_reference(table, sizes):
  """Adds ``ratio``: words/sec over those of the reference size's row of the same dtype.

  Returns:
    The reference size: 1,024 when measured, else the first size.
  """
  reference = REFERENCE_BATCH if REFERENCE_BATCH in sizes else sizes[0]
  for entry in table:
    # The reference's chunked row when it has one (it runs in one pass unless chunks are small).
    candidates = [e for e in table if e['batch'] == reference and e['dtype'] == entry['dtype']]
    base = next((e for e in candidates if e['chunked']), candidates[0] if candidates else None)
    if base and 'words_per_sec' in base and 'words_per_sec' in entry:
      entry['ratio'] = entry['words_per_sec'] / base['words_per_sec']
  return reference


def row_name(row, chunk):
  """A row's name in the progress lines: size, dtype and passes."""
  passes = f'chunks of {chunk}' if row['chunked'] else 'one pass'
  return f'{row["batch"]} {row["dtype"]} {passes}'


def format_table(table, waste, reference, unit, chunk, args):
  """The sweep's table as text (one line per row)."""
  lines = [f'{args.rounds} round(s) of {args.words} {unit} per row after {args.warmup} untimed '
           f'steps; ratio: to the {reference}-{unit} row of the same dtype',
           f'{"batch":>6s} {"dtype":15s} {"passes":16s} {unit + "/sec":>10s} {"(rounds)":>15s} '
           f'{"ratio":>6s} {"cpu " + unit + "/s":>11s} {"steps":>5s} {"peak RSS":>9s} '
           f'{"padding waste":>13s}']
  for entry in table:
    passes = f'chunks of {chunk}' if entry['chunked'] else 'one pass'
    pad = waste[entry['batch']][1 if entry['chunked'] else 0]
    head = f'{entry["batch"]:6d} {entry["dtype"]:15s} {passes:16s}'
    if 'error' in entry:
      lines.append(f'{head} {entry["error"]} {pad:13.1%}')
      continue
    low, high = entry['spread']
    ratio = f'{entry["ratio"]:.2f}x' if 'ratio' in entry else 'n/a'
    lines.append(f'{head} {entry["words_per_sec"]:10.1f} {f"({low:.0f}-{high:.0f})":>15s} '
                 f'{ratio:>6s} {entry["cpu_words_per_sec"]:11.1f} {entry["steps"]:5d} '
                 f'{entry["peak_bytes"] / 2 ** 30:7.2f} GB {pad:13.1%}')
  return '\n'.join(lines)


def format_dtype_ratios(table, dtypes):
  """Per size (and passes): words/sec of each further dtype over the first's."""
  first, lines = dtypes[0], []
  for entry in table:
    if entry['dtype'] == first or 'words_per_sec' not in entry:
      continue
    base = next((e for e in table if e['dtype'] == first and e['batch'] == entry['batch']
                 and e['chunked'] == entry['chunked'] and 'words_per_sec' in e), None)
    if base:
      passes = '' if entry['chunked'] else ', one pass'
      lines.append(f'{entry["dtype"]} against {first} at {entry["batch"]}{passes}: '
                   f'{entry["words_per_sec"] / base["words_per_sec"]:.2f}x the words/sec '
                   f'({entry["cpu_words_per_sec"] / base["cpu_words_per_sec"]:.2f}x per '
                   'CPU-second)')
  return '\n'.join(lines)
