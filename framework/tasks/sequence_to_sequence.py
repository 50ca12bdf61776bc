"""Sequence to sequence: teacher-forced training, evaluation by decoding, strings in, strings out.

The model is ``build(model_params, source_vocab_size, target_vocab_size)``
and maps ``(source [B, S], decoder inputs [B, T])`` to logits; a batch is
the dict of ``data.seq2seq`` (``source``, ``target`` = ``<s>`` ... ``</s>``,
``source_index``), and the data layer is a ``data.seq2seq.SequenceDataLayer``
(``sources``, ``references``, ``encode_sources``, ``target_strings``,
``decode_target``).

* **Training**: the decoder reads ``target[:, :-1]`` and predicts
  ``target[:, 1:]``; the loss is the label-smoothed cross-entropy summed over
  the real tokens of the micro-batch over their number
  (``models.sequence_losses.sequence_cross_entropy``, the smoothing of
  ``model_params.label_smoothing``), and the train metric is the
  teacher-forced ``token_accuracy``.
* **Evaluation**: every source of the split is decoded (greedy, or beam
  search when the eval view's ``model_params.beam_size`` is above 1, with
  its ``length_penalty``) and scored against all its references
  (``core.sequence_metrics``): the sequence error rate (sources whose output
  equals none of them) and the token error rate (edit distance to the
  closest over its length). The data layer names the two
  (``METRIC_NAMES``): ``ser`` and ``ter``, or ``wer`` and ``per`` for
  CMUdict's words and phones. The counts are summed over the batches and over
  all workers before dividing, so the rates are those of the whole split.
  ``loss`` (per token, without smoothing) and ``token_accuracy`` are the
  teacher-forced ones of the first reference. The best checkpoint has the
  lowest sequence error rate.
* **Export and infer**: the serving signature takes a batch of sources as
  strings and returns the decoded targets as strings (tokens joined by the
  layer's ``target_separator``; input and output named by the layer's
  ``SERVING_NAMES``: ``sources`` -> ``predictions``, or CMUdict's ``words``
  -> ``pronunciations``, ``b'T AH M EY T OW'``); ``--mode=infer`` does the
  same for the lines of a file or stdin, ``source<TAB>prediction`` a line,
  and says in one line how many source tokens were outside the vocabulary.
"""

import numpy as np
import tensorflow as tf

from core import sequence_metrics
from data import DATA_LAYERS
from data.base import DataError
from data.seq2seq import SequenceDataLayer
from data.sequences import Vocabulary
from framework import tasks
from framework.engines import distributed
from framework.tasks import base
from models.sequence_losses import sequence_cross_entropy
from models.sequence_losses import teacher_forced_loss
from models.sequence_losses import token_accuracy

# Sources decoded at once by --mode=infer when the eval view gives no batch.
INFER_BATCH = 256


def metric_names(data_layer_name):
  """``(sequence error rate, token error rate)`` names of a data layer (its ``METRIC_NAMES``)."""
  layer = DATA_LAYERS.resolve(data_layer_name)
  return tuple(getattr(layer, 'METRIC_NAMES', SequenceDataLayer.METRIC_NAMES))


class SequenceToSequenceTask(base.Task):
  """Sequence to sequence; see the module docstring.

  The class attributes give CMUdict's metric names; an instance names the two
  error rates as its config's data layer does (``EVAL_METRICS`` and
  ``BEST_METRIC`` are set per instance).

  Raises:
    ConfigError: for another task's key set in the config (the image
      classifier's ``label_smoothing``: the model's own
      ``model_params.label_smoothing`` is used).
  """

  NAME = 'sequence_to_sequence'
  TRAIN_METRICS = ('token_accuracy',)
  CONSOLE_METRICS = ('token_accuracy',)
  EVAL_METRICS = ('wer', 'per', 'loss', 'token_accuracy')
  BEST_METRIC = 'wer'
  HIGHER_IS_BETTER = False

  def __init__(self, config, eval_config=None):
    super().__init__(config, eval_config)
    # The config layer refuses it already; a task built directly answers alike.
    tasks.check_task_keys(config, self.NAME)
    self.sequence_errors, self.token_errors = metric_names(config['data_layer'])
    self.EVAL_METRICS = (self.sequence_errors, self.token_errors, 'loss', 'token_accuracy')
    self.BEST_METRIC = self.sequence_errors
    self.label_smoothing = float(config['model_params'].get('label_smoothing', 0.0))
    decoding = (eval_config or config)['model_params']
    self.beam_size = int(decoding.get('beam_size', 1))
    self.length_penalty = float(decoding.get('length_penalty', 0.0))
    self._eval_step = None  # compiled by the first evaluate()
    self._loss_step = None  # compiled by the first heldout_loss()
    self._decode = None  # compiled by the first decode

  def final_eval_config(self, eval_config):
    """The base view on the final split, decoded with ``model_params.final_beam_size`` when set."""
    final = super().final_eval_config(eval_config)
    if final is not None and final.get('model_params', {}).get('final_beam_size'):
      final['model_params']['beam_size'] = final['model_params']['final_beam_size']
    return final

  @property
  def example_unit(self):
    return 'tokens' if self.config['data_layer_params'].get('batch_unit') == 'tokens' else 'words'

  def build_model(self, data_layer):
    self.samples_data = data_layer
    return self.call_builder(data_layer.source_vocab_size, data_layer.target_vocab_size)

  # --- training ----------------------------------------------------------------------------

  def loss(self, model, batch):
    """Mean label-smoothed token cross-entropy of a batch and its ``token_accuracy``.

    A micro-batch larger than ``model_params.train_chunk_size`` has its
    gradient summed over chunks of that many examples
    (``models.sequence_losses.teacher_forced_loss``); one never larger runs in one pass.
    """
    chunk = self.config['model_params'].get('train_chunk_size')
    if chunk and self.config['batch_size_per_gpu'] <= chunk:
      chunk = None  # rows <= batch_size_per_gpu, in words and in tokens
    loss, accuracy = teacher_forced_loss(model, batch['source'], batch['target'],
                                         self.label_smoothing, chunk)
    return loss, {'token_accuracy': accuracy}

  # --- decoding ----------------------------------------------------------------------------

  def decode_fn(self, model):
    """``source ids [B, S] -> ids [B, L]`` by the eval view's decoding (not compiled)."""
    if self.beam_size > 1:
      beams, alpha = self.beam_size, self.length_penalty
      return lambda source: model.beam_search(source, beam_size=beams, alpha=alpha)[0]
    return model.greedy_decode

  def _compiled_decode(self, model):
    if self._decode is None:
      self._decode = tf.function(self.decode_fn(model), reduce_retracing=True)
    return self._decode

  def sample_lines(self, model, batch, count):
    """Source, reference and output of the first ``count`` examples of a batch, a line each.

    ``sample 1: source 'abc' | reference 'cba' | output 'cbb'``, the output
    decoded from the source by the model as it is now, as the evaluation
    decodes (greedy, or the eval view's beam); strings as the data layer the
    model was built for writes them.
    """
    data = self.samples_data
    source = batch['source'][:count]
    outputs = self._compiled_decode(model)(source).numpy()
    separator = data.target_separator
    lines = []
    for index, (row, target, source_index) in enumerate(
        zip(outputs, batch['target'][:count].numpy(), batch['source_index'][:count].numpy()),
        start=1):
      reference = separator.join(data.decode_target(target))
      output = separator.join(data.decode_target(row))
      lines.append(f'sample {index}: source {data.sources[source_index]!r} | reference '
                   f'{reference!r} | output {output!r}')
    return lines

  # --- evaluation --------------------------------------------------------------------------

  def _make_eval_step(self, model):
    decode = self.decode_fn(model)

    def eval_step(source, target):
      labels = target[:, 1:]
      logits = model((source, target[:, :-1]), training=False)
      loss_sum, count = sequence_cross_entropy(labels, logits, 0.0)
      correct, _ = token_accuracy(labels, logits)
      return tf.stack([loss_sum, correct, count]), decode(source)

    return tf.function(eval_step, reduce_retracing=True)

  def evaluate(self, model, data_layer, batch_size):
    """Decodes the split and scores it; sums over all workers (see the module docstring).

    Returns:
      dict with the two error rates (``METRIC_NAMES``: ``ser`` and ``ter``,
      or ``wer`` and ``per``), ``loss``, ``token_accuracy`` and ``examples``
      (sources scored, all workers).
    """
    if self._eval_step is None:
      self._eval_step = self._make_eval_step(model)
    sums = np.zeros(3, np.float64)
    counts = sequence_metrics.ErrorCounts.ZERO
    for batch in data_layer.dataset(batch_size):
      teacher_forced, ids = self._eval_step(batch['source'], batch['target'])
      sums += teacher_forced.numpy()
      hypotheses = [data_layer.decode_target(row) for row in ids.numpy()]
      references = [data_layer.references[i] for i in batch['source_index'].numpy()]
      counts += sequence_metrics.error_counts(hypotheses, references)
    totals = distributed.sum_array(np.concatenate([sums, np.array(counts, np.float64)]))
    loss_sum, correct, tokens = totals[:3]
    counts = sequence_metrics.ErrorCounts(*(int(round(t)) for t in totals[3:]))
    tokens = max(tokens, 1.0)
    return {self.sequence_errors: counts.wer, self.token_errors: counts.per,
            'loss': loss_sum / tokens, 'token_accuracy': correct / tokens,
            'examples': counts.words}

  def heldout_loss(self, model, data_layer, batch_size, batches):
    """``(teacher-forced loss per target token, sources)`` over the split's first ``batches`` batches.

    No decoding: the loss alone, summed over every worker's batches.
    """
    if self._loss_step is None:

      def loss_step(source, target):
        logits = model((source, target[:, :-1]), training=False)
        return tf.stack(sequence_cross_entropy(target[:, 1:], logits, 0.0))

      self._loss_step = tf.function(loss_step, reduce_retracing=True)
    sums = np.zeros(3, np.float64)
    for batch in data_layer.dataset(batch_size).take(batches):
      sums[:2] += self._loss_step(batch['source'], batch['target']).numpy()
      sums[2] += int(batch['source'].shape[0])
    loss_sum, tokens, sources = distributed.sum_array(sums)
    return loss_sum / max(tokens, 1.0), int(sources)

  def describe_eval(self, metrics):
    beam = f', beam {self.beam_size}' if self.beam_size > 1 else ''
    unit = 'words' if self.sequence_errors == 'wer' else 'sources'
    seq, tok = self.sequence_errors, self.token_errors
    return (f'loss {metrics["loss"]:.4f}, {seq} {metrics[seq]:.4f}, {tok} {metrics[tok]:.4f}, '
            f'token_accuracy {metrics["token_accuracy"]:.4f} ({metrics["examples"]} {unit}{beam})')

  def describe_final(self, metrics):
    seq, tok = self.sequence_errors, self.token_errors
    return (f'{seq}: {metrics[seq]:.4f} ({tok} {metrics[tok]:.4f}, loss {metrics["loss"]:.4f}, '
            f'token_accuracy {metrics["token_accuracy"]:.4f})')

  # --- export and infer --------------------------------------------------------------------

  def serving_function(self, model, data_layer):
    """Sources (tf.string ``[B]``) -> ``{output: tf.string [B]}``, named by ``SERVING_NAMES``."""
    spec, encode = data_layer.serving_input()
    output = data_layer.SERVING_NAMES[1]
    decode = self.decode_fn(model)

    @tf.function(input_signature=[spec])
    def serve(sources):
      source = encode(sources)
      # A batch of empty sources still decodes (one <unk> each); each output is then ''.
      empty = tf.equal(tf.strings.length(tf.strings.strip(sources)), 0)
      source = tf.cond(tf.shape(source)[1] > 0, lambda: source,
                       lambda: tf.fill([tf.shape(sources)[0], 1], Vocabulary.UNK))
      predictions = data_layer.target_strings(decode(source))
      return {output: tf.where(empty, tf.constant(''), predictions)}

    return serve

  def describe_export(self, data_layer):
    source, output = data_layer.SERVING_NAMES
    if output == 'pronunciations':
      return ("takes a batch of words (string [None], input 'words'), returns their "
              "pronunciations as space-separated phones ('pronunciations')")
    joined = 'characters' if data_layer.target_separator == '' else 'space-separated words'
    return (f"takes a batch of sources (string [None], input '{source}'), returns the "
            f"decoded targets as strings of {joined} ('{output}')")

  def infer_inputs(self, source):
    """The lines of ``--infer_input`` (a file, or ``-`` for stdin).

    Raises:
      DataError: the source cannot be read, is not UTF-8 text, or holds no source.
    """
    lines = super().infer_inputs(source)
    if not any(line.strip() for line in lines):
      raise DataError(f'--infer_input {source}: {"stdin" if source == "-" else "the file"} '
                      'holds no source; give one source a line')
    return lines

  def infer(self, model, data_layer, lines, batch_size):
    """The decoded targets of the sources of ``lines``, one ``source<TAB>prediction`` line each.

    Blank lines are skipped; a source's surrounding white space is dropped.
    Sources are decoded in batches of similar length, written in input order.
    When some source tokens are outside the vocabulary (they become
    ``<unk>``), one line says how many.

    Raises:
      DataError: a source longer than the data layer's ``max_source_length``
        (one line naming its line and the key), before anything is decoded: its
        attention alone could take more memory than the machine has.
    """
    numbered = [(number, line.strip()) for number, line in enumerate(lines, start=1)
                if line.strip()]
    sources = [source for _, source in numbered]
    if not sources:
      return []
    limit = getattr(data_layer, 'max_source_length', None)
    for number, source in numbered:
      length = len(data_layer.tokenize_source(source)) if limit else 0
      if limit and length > limit:
        key = getattr(data_layer, 'source_length_key', 'max_length')
        raise DataError(f'--infer_input: line {number} is a source of {length} tokens, longer '
                        f'than data_layer_params.{key} {limit}; cut it into shorter sources, or '
                        f'raise the limit (--set data_layer_params.{key}=N)')
    unknown = data_layer.unknown_source_tokens(sources)
    if unknown:
      total = sum(len(data_layer.tokenize_source(s)) for s in sources)
      distributed.log(f'note: {unknown} of the {total} source tokens are outside the '
                      'vocabulary of the training data and were read as <unk>')
    serve = self.serving_function(model, data_layer)
    output = data_layer.SERVING_NAMES[1]
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    batch_size = batch_size or INFER_BATCH
    predictions = [None] * len(sources)
    for start in range(0, len(order), batch_size):
      chosen = order[start:start + batch_size]
      out = serve(tf.constant([sources[i] for i in chosen]))[output].numpy()
      for i, text in zip(chosen, out):
        predictions[i] = text.decode('utf-8')
    return [f'{source}\t{text}' for source, text in zip(sources, predictions)]
