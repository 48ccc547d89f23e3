"""The classic bert4keras script shapes, ported to bert4long, run end to end.

Each test is written as the bert4keras example would be (same imports, same names),
on a tiny Google-layout checkpoint and a trivially learnable synthetic task, and
checks that the script *learns*: the metric after training beats the one before.
"""
import numpy as np
import pytest

from bert4long.backend import K, batch_gather, keras
from bert4long.layers import LayerNormalization
from bert4long.layers.crf import ConditionalRandomField
from bert4long.layers.loss import Loss
from bert4long.models import build_transformer_model
from bert4long.optimizers import Adam, extend_with_piecewise_linear_lr
from bert4long.snippets import AutoRegressiveDecoder, DataGenerator, ViterbiDecoder, sequence_padding, to_array
from bert4long.tokenizers import Tokenizer, load_vocab

WORDS = [f"w{i}" for i in range(59)]  # the tiny vocab: [PAD] [UNK] [CLS] [SEP] [MASK] w0..w58


@pytest.fixture(autouse=True)
def seeded():
    keras.utils.set_random_seed(0)


def _texts(rng, count, length, vocabulary):
    return [" ".join(rng.choice(vocabulary, length)) for _ in range(count)]


@pytest.mark.slow
def test_sentence_classifier(tiny_bert):
    config_path, checkpoint_path, dict_path = tiny_bert
    rng = np.random.default_rng(0)
    tokenizer = Tokenizer(dict_path, do_lower_case=True)
    # label 1 when the sentence mentions a word of the first half of the vocabulary
    texts = _texts(rng, 96, 4, WORDS[30:]) + _texts(rng, 96, 3, WORDS[30:])
    data = [(t + " " + WORDS[i % 30], 1) if i % 2 else (t, 0) for i, t in enumerate(texts)]
    train_data, valid_data = data[:160], data[160:]

    class data_generator(DataGenerator):  # noqa: N801 -- bert4keras's spelling
        def __iter__(self, random=False):
            batch_token_ids, batch_segment_ids, batch_labels = [], [], []
            for is_end, (text, label) in self.sample(random):
                token_ids, segment_ids = tokenizer.encode(text, maxlen=16)
                batch_token_ids.append(token_ids)
                batch_segment_ids.append(segment_ids)
                batch_labels.append([label])
                if len(batch_token_ids) == self.batch_size or is_end:
                    batch_token_ids = sequence_padding(batch_token_ids)
                    batch_segment_ids = sequence_padding(batch_segment_ids)
                    batch_labels = sequence_padding(batch_labels)
                    yield [batch_token_ids, batch_segment_ids], batch_labels
                    batch_token_ids, batch_segment_ids, batch_labels = [], [], []

    bert = build_transformer_model(config_path, checkpoint_path, return_keras_model=False)
    output = keras.layers.Lambda(lambda x: x[:, 0], name="CLS-token")(bert.model.output)
    output = keras.layers.Dense(2, activation="softmax", kernel_initializer="glorot_uniform")(output)
    model = keras.models.Model(bert.model.input, output)
    AdamLR = extend_with_piecewise_linear_lr(Adam, name="AdamLR")
    model.compile(
        loss="sparse_categorical_crossentropy",
        optimizer=AdamLR(learning_rate=3e-3, lr_schedule={10: 1, 200: 0.5}),
        metrics=["accuracy"],
    )
    train_generator = data_generator(train_data, batch_size=16)
    valid_generator = data_generator(valid_data, batch_size=16)

    def evaluate(data):
        total, right = 0.0, 0.0
        for x_true, y_true in data:
            y_pred = model.predict(x_true, verbose=0).argmax(axis=1)
            right += (y_true[:, 0] == y_pred).sum()
            total += len(y_true)
        return right / total

    before = evaluate(valid_generator)
    model.fit(train_generator.forfit(), steps_per_epoch=len(train_generator), epochs=12, verbose=0)
    after = evaluate(valid_generator)
    assert after >= 0.9 and after > before + 0.2, (before, after)
    assert float(model.optimizer.learning_rate) == pytest.approx(3e-3 * (1 - 0.5 * (120 - 10) / 190), rel=1e-4)


@pytest.mark.slow
def test_crf_ner_tagger(tiny_bert):
    config_path, checkpoint_path, dict_path = tiny_bert
    rng = np.random.default_rng(1)
    tokenizer = Tokenizer(dict_path, do_lower_case=True)
    entity_words = set(WORDS[:20])  # labels: 0 O, 1 B-ENT, 2 I-ENT (runs of entity words)

    def tag(words):
        labels = []
        for i, w in enumerate(words):
            inside = w in entity_words
            labels.append(0 if not inside else (2 if i and words[i - 1] in entity_words else 1))
        return labels

    sentences = [list(rng.choice(WORDS, rng.integers(3, 9))) for _ in range(160)]
    data = [(s, tag(s)) for s in sentences]
    train_data, valid_data = data[:128], data[128:]

    class data_generator(DataGenerator):  # noqa: N801
        def __iter__(self, random=False):
            batch_token_ids, batch_segment_ids, batch_labels = [], [], []
            for is_end, (words, labels) in self.sample(random):
                token_ids = [tokenizer._token_start_id] + tokenizer.tokens_to_ids(words) + [tokenizer._token_end_id]
                batch_token_ids.append(token_ids)
                batch_segment_ids.append([0] * len(token_ids))
                batch_labels.append([0] + labels + [0])
                if len(batch_token_ids) == self.batch_size or is_end:
                    batch_token_ids = sequence_padding(batch_token_ids)
                    batch_segment_ids = sequence_padding(batch_segment_ids)
                    batch_labels = sequence_padding(batch_labels)
                    yield [batch_token_ids, batch_segment_ids], batch_labels
                    batch_token_ids, batch_segment_ids, batch_labels = [], [], []

    model = build_transformer_model(config_path, checkpoint_path)
    output = keras.layers.Dense(3)(model.output)
    CRF = ConditionalRandomField(lr_multiplier=100)
    # bert4long encoders attach no Keras mask: give the CRF the padding mask explicitly.
    output = CRF(output, mask=keras.ops.not_equal(model.inputs[0], 0))
    model = keras.models.Model(model.input, output)
    model.compile(loss=CRF.sparse_loss, optimizer=Adam(3e-3), metrics=[CRF.sparse_accuracy])

    def recognize(words):
        token_ids = [tokenizer._token_start_id] + tokenizer.tokens_to_ids(words) + [tokenizer._token_end_id]
        nodes = model.predict(to_array([token_ids], [[0] * len(token_ids)]), verbose=0)[0]
        return ViterbiDecoder(trans=K.eval(CRF.trans), starts=[0], ends=[0]).decode(nodes)[1:-1].tolist()

    def accuracy():
        right = total = 0
        for words, labels in valid_data:
            right += sum(a == b for a, b in zip(recognize(words), labels))
            total += len(labels)
        return right / total

    before = accuracy()
    history = model.fit(data_generator(train_data, 16).forfit(), steps_per_epoch=8, epochs=10, verbose=0).history
    after = accuracy()
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    assert after >= 0.9 and after > before + 0.2, (before, after)


@pytest.mark.slow
def test_unilm_seq2seq_generator(tiny_bert):
    config_path, checkpoint_path, dict_path = tiny_bert
    rng = np.random.default_rng(2)
    token_dict, keep_tokens = load_vocab(
        dict_path, simplified=True, startswith=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    )
    tokenizer = Tokenizer(token_dict, do_lower_case=True)
    # the "title" of a text is a fixed mapping of its first word (w0..w9 -> w10..w19)
    sources = [list(rng.choice(WORDS[:10], 3)) for _ in range(96)]
    data = [(" ".join(s), WORDS[WORDS.index(s[0]) + 10]) for s in sources]

    class data_generator(DataGenerator):  # noqa: N801
        def __iter__(self, random=False):
            batch_token_ids, batch_segment_ids = [], []
            for is_end, (content, title) in self.sample(random):
                token_ids, segment_ids = tokenizer.encode(content, title, maxlen=12)
                batch_token_ids.append(token_ids)
                batch_segment_ids.append(segment_ids)
                if len(batch_token_ids) == self.batch_size or is_end:
                    batch_token_ids = sequence_padding(batch_token_ids)
                    batch_segment_ids = sequence_padding(batch_segment_ids)
                    yield [batch_token_ids, batch_segment_ids], None
                    batch_token_ids, batch_segment_ids = [], []

    class CrossEntropy(Loss):
        """Cross-entropy on the target (segment 1) part only."""

        def compute_loss(self, inputs, mask=None):
            y_true, y_mask, y_pred = inputs
            y_true = y_true[:, 1:]
            y_mask = y_mask[:, 1:]  # int32 segment ids: `Loss` hands them over as floats, as bert4keras did
            y_pred = y_pred[:, :-1]
            loss = K.sparse_categorical_crossentropy(y_true, y_pred)
            return K.sum(loss * y_mask) / K.sum(y_mask)

    model = build_transformer_model(
        config_path, checkpoint_path, application="unilm", keep_tokens=keep_tokens, with_mlm=True
    )
    output = CrossEntropy(2)(model.inputs + model.outputs)
    model = keras.models.Model(model.inputs, output)
    model.compile(optimizer=Adam(5e-3))

    class AutoTitle(AutoRegressiveDecoder):
        @AutoRegressiveDecoder.wraps(default_rtype="probas")
        def predict(self, inputs, output_ids, states):
            token_ids, segment_ids = inputs
            token_ids = np.concatenate([token_ids, output_ids], 1)
            segment_ids = np.concatenate([segment_ids, np.ones_like(output_ids)], 1)
            return self.last_token(model).predict([token_ids, segment_ids], verbose=0)

        def generate(self, text, topk=2):
            token_ids, segment_ids = tokenizer.encode(text, maxlen=10)
            output_ids = self.beam_search([token_ids, segment_ids], topk=topk)
            return tokenizer.decode(output_ids)

    autotitle = AutoTitle(start_id=None, end_id=tokenizer._token_end_id, maxlen=3)

    def exact_match():
        return np.mean([autotitle.generate(content) == title for content, title in data[:12]])

    before = exact_match()
    history = model.fit(data_generator(data, 16).forfit(), steps_per_epoch=6, epochs=16, verbose=0).history
    after = exact_match()
    assert history["loss"][-1] < 0.3 * history["loss"][0]
    assert after >= 0.75 and after > before + 0.5, (before, after)


@pytest.mark.slow
def test_mlm_probe(tiny_bert):
    config_path, checkpoint_path, dict_path = tiny_bert
    tokenizer = Tokenizer(dict_path, do_lower_case=True)
    model = build_transformer_model(config_path, checkpoint_path, with_mlm=True)
    sentence = "w1 w2 w3 w4 w5 w6"

    def probe():
        token_ids, segment_ids = tokenizer.encode(sentence)
        token_ids[3] = tokenizer._token_mask_id
        token_ids, segment_ids = to_array([token_ids], [segment_ids])
        probas = model.predict([token_ids, segment_ids], verbose=0)[0]
        return tokenizer.decode(probas[3:4].argmax(axis=1)), float(probas[3, tokenizer.token_to_id("w3")])

    guess_before, proba_before = probe()
    # teach the masked LM that sentence: mask each position in turn, predict the original
    token_ids, segment_ids = tokenizer.encode(sentence)
    inputs, targets, weights = [], [], []
    for i in range(1, len(token_ids) - 1):
        masked = list(token_ids)
        masked[i] = tokenizer._token_mask_id
        inputs.append(masked)
        targets.append(token_ids)
        weights.append([float(j == i) for j in range(len(token_ids))])
    inputs, targets, weights = (np.tile(a, (8, 1)) for a in to_array(inputs, targets, weights))
    model.compile(loss="sparse_categorical_crossentropy", optimizer=Adam(1e-2))
    model.fit([inputs, np.zeros_like(inputs)], targets, sample_weight=weights, batch_size=12, epochs=10, verbose=0)
    guess_after, proba_after = probe()
    assert guess_before != "w3" and guess_after == "w3"
    assert proba_after > 0.5 > proba_before


@pytest.mark.slow
def test_lm_random_sample_and_greedy_decoding(tiny_bert):
    config_path, checkpoint_path, dict_path = tiny_bert
    tokenizer = Tokenizer(dict_path, do_lower_case=True)
    model = build_transformer_model(config_path, checkpoint_path, application="lm", with_mlm=True)

    class StoryCompletion(AutoRegressiveDecoder):
        @AutoRegressiveDecoder.wraps(default_rtype="probas")
        def predict(self, inputs, output_ids, states):
            token_ids = np.concatenate([inputs[0], output_ids], 1)
            return self.last_token(model).predict([token_ids, np.zeros_like(token_ids)], verbose=0)

    completion = StoryCompletion(start_id=None, end_id=tokenizer._token_end_id, maxlen=4)
    prompt = tokenizer.encode("w1 w2")[0][:-1]  # [CLS] w1 w2, no [SEP]
    # greedy reference from the full model: argmax of the last position, step by step
    ids = list(prompt)
    for _ in range(4):
        probas = model.predict(to_array([ids], [[0] * len(ids)]), verbose=0)[0, -1]
        ids.append(int(probas.argmax()))
        if ids[-1] == tokenizer._token_end_id:
            break
    greedy = ids[len(prompt):]
    # ids: at each step the top two probabilities differ by 4e-3 or more, far above float32 rounding
    assert completion.beam_search([prompt], topk=1).tolist() == greedy
    np.random.seed(0)
    assert all(s.tolist() == greedy for s in completion.random_sample([prompt], n=2, topk=1))
    samples = completion.random_sample([prompt], n=4, topp=0.9)
    assert len(samples) == 4 and all(1 <= len(s) <= 4 for s in samples)
    assert all(0 <= t < tokenizer.vocab_size for s in samples for t in s)


@pytest.mark.slow
def test_relation_extraction_with_conditional_layer_norm(tiny_bert):
    """task_relation_extraction.py: subject tagger, then objects and predicates tagged by a
    LayerNorm conditioned on the subject's start and end vectors, trained through one Loss layer."""
    config_path, checkpoint_path, dict_path = tiny_bert
    rng = np.random.default_rng(3)
    tokenizer = Tokenizer(dict_path, do_lower_case=True)
    # a sentence holds one subject word (w0..w9) and one object word (w10..w19); the predicate
    # is the object word's parity
    data = []
    for _ in range(96):
        words = list(rng.choice(WORDS[20:], 5))
        s, o = rng.choice(5, 2, replace=False)
        words[s], words[o] = rng.choice(WORDS[:10]), rng.choice(WORDS[10:20])
        data.append((words, s + 1, o + 1, WORDS.index(words[o]) % 2))  # +1: [CLS]
    num_predicates = 2

    class data_generator(DataGenerator):  # noqa: N801
        def __iter__(self, random=False):
            batch = [[] for _ in range(5)]
            for is_end, (words, s, o, p) in self.sample(random):
                token_ids, segment_ids = tokenizer.encode(" ".join(words))
                subject_labels = np.zeros((len(token_ids), 2))
                subject_labels[s] = 1
                object_labels = np.zeros((len(token_ids), num_predicates, 2))
                object_labels[o, p] = 1
                for column, value in zip(batch, [token_ids, segment_ids, subject_labels, [s, s], object_labels]):
                    column.append(value)
                if len(batch[0]) == self.batch_size or is_end:
                    yield [sequence_padding(column) for column in batch], None
                    batch = [[] for _ in range(5)]

    def extract_subject(inputs):
        """Subject vector: the encoder output at its start and end, concatenated."""
        output, subject_ids = inputs
        start = batch_gather(output, subject_ids[:, :1])
        end = batch_gather(output, subject_ids[:, 1:])
        subject = K.concatenate([start, end], 2)
        return subject[:, 0]

    subject_labels = keras.layers.Input(shape=(None, 2), name="Subject-Labels")
    subject_ids = keras.layers.Input(shape=(2,), name="Subject-Ids")
    object_labels = keras.layers.Input(shape=(None, num_predicates, 2), name="Object-Labels")
    bert = build_transformer_model(config_path, checkpoint_path, return_keras_model=False)
    output = keras.layers.Dense(2, activation="sigmoid", kernel_initializer=bert.initializer)(bert.model.output)
    subject_preds = keras.layers.Lambda(lambda x: x**2)(output)
    subject_model = keras.models.Model(bert.model.inputs, subject_preds)
    output = bert.model.layers[-2].get_output_at(-1)  # bert4keras's line: the last residual sum, before the norm
    assert bert.model.layers[-2].name.endswith("-FeedForward-Add") and subject_model.outputs[0] is subject_preds
    subject = keras.layers.Lambda(extract_subject)([output, subject_ids])
    output = LayerNormalization(conditional=True)([output, subject])
    output = keras.layers.Dense(num_predicates * 2, activation="sigmoid", kernel_initializer=bert.initializer)(output)
    output = keras.layers.Lambda(lambda x: x**4)(output)
    object_preds = keras.layers.Reshape((-1, num_predicates, 2))(output)
    object_model = keras.models.Model(bert.model.inputs + [subject_ids], object_preds)

    class TotalLoss(Loss):
        def compute_loss(self, inputs, mask=None):
            subject_labels, object_labels = inputs[:2]
            subject_preds, object_preds, _ = inputs[2:]
            if mask[4] is None:
                mask = 1.0
            else:
                mask = K.cast(mask[4], K.floatx())
            subject_loss = K.binary_crossentropy(subject_labels, subject_preds)
            subject_loss = K.mean(subject_loss, 2)
            subject_loss = K.sum(subject_loss * mask) / K.sum(mask)
            object_loss = K.binary_crossentropy(object_labels, object_preds)
            object_loss = K.sum(K.mean(object_loss, 3), 2)
            object_loss = K.sum(object_loss * mask) / K.sum(mask)
            return subject_loss + object_loss

    subject_preds, object_preds = TotalLoss([2, 3])(
        [subject_labels, object_labels, subject_preds, object_preds, bert.model.output]
    )
    train_model = keras.models.Model(
        bert.model.inputs + [subject_labels, subject_ids, object_labels], [subject_preds, object_preds]
    )
    train_model.compile(optimizer=Adam(5e-3))

    def predicate_accuracy():
        """Share of sentences whose object position gets the right predicate, given the subject."""
        encoded = [tokenizer.encode(" ".join(words)) for words, *_ in data[:32]]
        inputs = [sequence_padding([e[0] for e in encoded]), sequence_padding([e[1] for e in encoded]),
                  to_array([[s, s] for _, s, _, _ in data[:32]])]
        preds = object_model.predict(inputs, verbose=0)
        return np.mean([preds[i, o, :, 0].argmax() == p for i, (_, _, o, p) in enumerate(data[:32])])

    before = predicate_accuracy()
    history = train_model.fit(data_generator(data, 16).forfit(), steps_per_epoch=6, epochs=8, verbose=0).history
    after = predicate_accuracy()
    assert history["loss"][-1] < 0.3 * history["loss"][0], history["loss"]
    assert after >= 0.9 and after > before, (before, after)
    norm = next(layer for layer in object_model.layers if isinstance(layer, LayerNormalization))
    assert np.abs(norm.gamma_dense.kernel.numpy()).max() > 0  # the condition was learned from
