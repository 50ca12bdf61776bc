"""Sequence to sequence: teacher-forced training, evaluation by decoding, words in, phones out.

The model is ``build(model_params, source_vocab_size, target_vocab_size)``
and maps ``(source [B, S], decoder inputs [B, T])`` to logits; a batch is
the dict of ``data.seq2seq`` (``source``, ``target`` = ``<s>`` ... ``</s>``,
``word_index``).

* **Training**: the decoder reads ``target[:, :-1]`` and predicts
  ``target[:, 1:]``; the loss is the label-smoothed cross-entropy summed over
  the real tokens of the micro-batch over their number
  (``models.transformer.sequence_cross_entropy``, the smoothing of
  ``model_params.label_smoothing``), and the train metric is the
  teacher-forced ``token_accuracy``.
* **Evaluation**: every word of the split is decoded (greedy, or beam search
  when the eval view's ``model_params.beam_size`` is above 1, with its
  ``length_penalty``) and scored against all its reference pronunciations
  (``core.sequence_metrics``): ``wer`` (words whose output equals none of
  them) and ``per`` (edit distance to the closest over its length). The
  counts are summed over the batches and over all workers before dividing,
  so the rates are those of the whole split. ``loss`` (per token, without
  smoothing) and ``token_accuracy`` are the teacher-forced ones of the first
  reference. The best checkpoint has the lowest ``wer``.
* **Export and infer**: the serving signature takes a batch of words as
  strings and returns their pronunciations as strings of space-separated
  phones (``b'T AH M EY T OW'``); ``--mode=infer`` does the same for the
  lines of a file or stdin.
"""

import numpy as np
import tensorflow as tf

from core import sequence_metrics
from core.params import ConfigError
from data.sequences import Vocabulary
from framework import distributed
from framework.tasks import base
from models import MODELS
from models.transformer import sequence_cross_entropy
from models.transformer import token_accuracy

# Words decoded at once by --mode=infer when the eval view gives no batch.
INFER_BATCH = 256


class SequenceToSequenceTask(base.Task):
  """Sequence to sequence; see the module docstring.

  Raises:
    ConfigError: for the classification loss's ``label_smoothing`` set in a
      sequence config (the model's own ``model_params.label_smoothing`` is used).
  """

  NAME = 'sequence_to_sequence'
  TRAIN_METRICS = ('token_accuracy',)
  CONSOLE_METRICS = ('token_accuracy',)
  EVAL_METRICS = ('wer', 'per', 'loss', 'token_accuracy')
  BEST_METRIC = 'wer'
  HIGHER_IS_BETTER = False

  def __init__(self, config, eval_config=None):
    super().__init__(config, eval_config)
    if config['label_smoothing']:
      raise ConfigError('label_smoothing: the image classifiers\' setting; a sequence model '
                        'smooths its loss with model_params.label_smoothing')
    self.label_smoothing = float(config['model_params'].get('label_smoothing', 0.0))
    decoding = (eval_config or config)['model_params']
    self.beam_size = int(decoding.get('beam_size', 1))
    self.length_penalty = float(decoding.get('length_penalty', 0.0))
    self._eval_step = None  # compiled by the first evaluate()
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
    cfg = self.config
    return MODELS.resolve(cfg['model'])(cfg['model_params'], data_layer.source_vocab_size,
                                        data_layer.target_vocab_size)

  # --- training ----------------------------------------------------------------------------

  def loss(self, model, batch):
    """Mean label-smoothed token cross-entropy of a batch and its ``token_accuracy``."""
    target = batch['target']
    labels = target[:, 1:]
    logits = model((batch['source'], target[:, :-1]), training=True)
    loss_sum, count = sequence_cross_entropy(labels, logits, self.label_smoothing)
    correct, _ = token_accuracy(labels, logits)
    count = tf.maximum(count, 1.0)
    return loss_sum / count, {'token_accuracy': correct / count}

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
      dict with ``wer``, ``per``, ``loss``, ``token_accuracy`` and
      ``examples`` (words scored, all workers).
    """
    if self._eval_step is None:
      self._eval_step = self._make_eval_step(model)
    sums = np.zeros(3, np.float64)
    counts = sequence_metrics.ErrorCounts.ZERO
    for batch in data_layer.dataset(batch_size):
      teacher_forced, ids = self._eval_step(batch['source'], batch['target'])
      sums += teacher_forced.numpy()
      hypotheses = [data_layer.decode_phones(row) for row in ids.numpy()]
      references = [data_layer.references[i] for i in batch['word_index'].numpy()]
      counts += sequence_metrics.error_counts(hypotheses, references)
    totals = distributed.sum_array(np.concatenate([sums, np.array(counts, np.float64)]))
    loss_sum, correct, tokens = totals[:3]
    counts = sequence_metrics.ErrorCounts(*(int(round(t)) for t in totals[3:]))
    tokens = max(tokens, 1.0)
    return {'wer': counts.wer, 'per': counts.per, 'loss': loss_sum / tokens,
            'token_accuracy': correct / tokens, 'examples': counts.words}

  def describe_eval(self, metrics):
    beam = f', beam {self.beam_size}' if self.beam_size > 1 else ''
    return (f'loss {metrics["loss"]:.4f}, wer {metrics["wer"]:.4f}, per {metrics["per"]:.4f}, '
            f'token_accuracy {metrics["token_accuracy"]:.4f} ({metrics["examples"]} words{beam})')

  def describe_final(self, metrics):
    return (f'wer: {metrics["wer"]:.4f} (per {metrics["per"]:.4f}, loss {metrics["loss"]:.4f}, '
            f'token_accuracy {metrics["token_accuracy"]:.4f})')

  # --- export and infer --------------------------------------------------------------------

  def serving_function(self, model, data_layer):
    """``words`` (tf.string ``[B]``) -> ``{'pronunciations': tf.string [B]}``."""
    spec, encode = data_layer.serving_input()
    decode = self.decode_fn(model)

    @tf.function(input_signature=[spec])
    def serve(words):
      source = encode(words)
      # A batch of empty words still decodes (one <unk> each); each output is then ''.
      empty = tf.equal(tf.strings.length(words), 0)
      source = tf.cond(tf.shape(source)[1] > 0, lambda: source,
                       lambda: tf.fill([tf.shape(words)[0], 1], Vocabulary.UNK))
      phones = data_layer.phone_strings(decode(source))
      return {'pronunciations': tf.where(empty, tf.constant(''), phones)}

    return serve

  def describe_export(self, data_layer):
    del data_layer
    return ("takes a batch of words (string [None], input 'words'), returns their "
            "pronunciations as space-separated phones ('pronunciations')")

  def infer(self, model, data_layer, lines, batch_size):
    """Pronunciations of the words of ``lines``, one ``word<TAB>phones`` line per word.

    Blank lines are skipped; a word's surrounding white space is dropped.
    Words are decoded in batches of similar length, written in input order.
    """
    words = [line.strip() for line in lines if line.strip()]
    if not words:
      return []
    serve = self.serving_function(model, data_layer)
    order = sorted(range(len(words)), key=lambda i: len(words[i]))
    batch_size = batch_size or INFER_BATCH
    phones = [None] * len(words)
    for start in range(0, len(order), batch_size):
      chosen = order[start:start + batch_size]
      out = serve(tf.constant([words[i] for i in chosen]))['pronunciations'].numpy()
      for i, text in zip(chosen, out):
        phones[i] = text.decode('utf-8')
    return [f'{word}\t{text}' for word, text in zip(words, phones)]
