"""A frozen text encoder's conditioning (`FrozenTextConditioning`): each
caption encoded once, on the host; the step fed embeddings and dropping them
to the empty prompt's. Any callable encoder serves: here one of NumPy."""

import os
import zlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_diffusion as kd
from keras_diffusion.conditioning import pack_pooled, split_pooled
from keras_diffusion.utils import files
from tests.denoisers import conv_denoiser

CAPTIONS = ["red heart", "cat face", "green heart", "dog face"]
TOKENS, WIDTH = 3, 4


class CountingEncoder:
    """Texts to embeddings drawn from each text's checksum, in (-1, 1) (as
    int32 they would all be 0); records every text it is given."""

    def __init__(self):
        self.seen = []

    def __call__(self, texts):
        texts = [text.decode() for text in texts.numpy()]
        self.seen.extend(texts)
        return np.stack(
            [
                np.random.default_rng(zlib.crc32(text.encode())).uniform(
                    -0.9, 0.9, size=(TOKENS, WIDTH)
                )
                for text in texts
            ]
        )


class Embedded(keras.utils.PyDataset):
    def __init__(self, images, embeddings):
        super().__init__()
        self.images, self.embeddings = images, embeddings

    def __len__(self):
        return 2

    def __getitem__(self, index):
        rows = slice(4 * index, 4 * index + 4)
        return self.images[rows], self.embeddings[rows]


def test_each_caption_is_encoded_once_and_the_step_gets_embeddings():
    encoder = CountingEncoder()
    text = kd.FrozenTextConditioning(encoder, dropout=0.5)
    assert encoder.seen == [""]  # the null, once
    model = kd.DiffusionModel(
        conv_denoiser(context_shape=(TOKENS, WIDTH)),
        kd.EDMSchedule(),
        conditioning=text,
        ema_decay=0.5,
        seed=0,
    )
    # Not trained, not averaged: the EMA holds the denoiser's weights alone.
    assert len(model.averaged_variables) == len(model.denoiser.trainable_variables)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    images = np.random.default_rng(0).uniform(-1, 1, (8, 8, 8, 1)).astype("float32")
    captions = np.array(CAPTIONS * 2)
    model.fit(images, captions, batch_size=4, epochs=2, verbose=0)
    dataset = tf.data.Dataset.from_tensor_slices((images, captions)).batch(4)
    model.fit(dataset, epochs=1, verbose=0)
    # A PyDataset, which runs outside tf.data, yields the embeddings.
    model.fit(Embedded(images, text.tokenize(captions).numpy()), epochs=1, verbose=0)
    prompts = ["red heart", "blue heart"]  # one seen in training, one new
    kwargs = {"guidance_scale": 2.0, "seed": 0, "verbose": 0}
    images = model.generate(2, prompts=prompts, **kwargs)
    assert sorted(encoder.seen) == sorted(["", *CAPTIONS, "blue heart"])
    # The sampling loop gets the embeddings as they are: the prompt shows.
    other = model.generate(2, prompts=prompts[::-1], **kwargs)
    assert np.abs(images - other).max() > 1e-3
    expected = encoder(tf.constant(["cat face"]))[0]
    np.testing.assert_allclose(text.embeddings(["cat face"])[0], expected, 1e-6)


def test_caption_dropout_in_the_step_gives_the_empty_prompts_embedding():
    text = kd.FrozenTextConditioning(CountingEncoder(), dropout=0.5)
    embeddings = text.embeddings(CAPTIONS * 8)
    out = text.in_step(tf.constant(embeddings), 32, tf.constant([1, 2]), True)
    out = out.numpy()
    null = text.null(1)[0]
    dropped = np.array([np.array_equal(row, null) for row in out])
    kept = np.array(
        [np.array_equal(a, b) for a, b in zip(out, embeddings, strict=True)]
    )
    assert (dropped | kept).all() and 0 < dropped.sum() < 32
    # Not training: the captions as they are.
    same = text.in_step(tf.constant(embeddings), 32, tf.constant([1, 2]), False)
    np.testing.assert_array_equal(same.numpy(), embeddings)


def test_a_pooled_output_travels_as_a_last_token():
    sequence = np.ones((2, 3, 4), np.float32)
    pooled = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    context = pack_pooled(sequence, pooled)
    assert context.shape == (2, 4, 4)
    back_sequence, back_pooled = split_pooled(context, 2)
    np.testing.assert_array_equal(back_sequence, sequence)
    np.testing.assert_array_equal(back_pooled, pooled)
    with pytest.raises(ValueError, match="pooled of shape"):
        pack_pooled(sequence, np.ones((2, 5), np.float32))


def test_an_encoder_must_be_callable_and_give_three_axes():
    with pytest.raises(TypeError, match="encoder=3"):
        kd.FrozenTextConditioning(3)
    with pytest.raises(ValueError, match=r"outputs of shape \(1, 4\)"):
        kd.FrozenTextConditioning(lambda texts: np.zeros((len(texts), 4)))


class LongestPadding:
    """Pads each batch to its longest caption, a token a word (as a
    tokenizer's `padding=True`): the empty prompt gets one token."""

    def __call__(self, texts):
        texts = [text.decode() for text in texts.numpy()]
        tokens = max([1] + [len(text.split()) for text in texts])
        return np.zeros((len(texts), tokens, WIDTH), np.float32)


def test_an_encoder_must_return_a_fixed_number_of_tokens():
    text = kd.FrozenTextConditioning(LongestPadding())
    assert text.sequence_length == 1
    message = (
        r"encoder LongestPadding must return a fixed number of tokens.*"
        r"`sequence_length`=1.*Received: 2 tokens.*\['cat', 'red heart'\]"
    )
    with pytest.raises(ValueError, match=message):
        text.embeddings(["red heart", "cat"])
    # Nothing was cached: refused again; a one-word caption passes.
    with pytest.raises(ValueError, match="fixed number of tokens"):
        text.embeddings(["red heart"])
    assert text.embeddings(["cat"]).shape == (1, 1, WIDTH)
    # fit's input pipeline says the same (not a shape mismatch).
    captions = tf.data.Dataset.from_tensor_slices(["dog", "cat face"]).batch(2)
    with pytest.raises(tf.errors.OpError, match="fixed number of tokens"):
        list(captions.map(text.tokenize))


def test_pooled_needs_an_encoder_of_two_outputs():
    message = r"`pooled=True`.*CountingEncoder.*one array of shape \(1, 3, 4\)"
    with pytest.raises(ValueError, match=message):
        kd.FrozenTextConditioning(CountingEncoder(), pooled=True)


def plain_encoder(texts):
    return CountingEncoder()(texts)


@keras.saving.register_keras_serializable(package="keras_diffusion_tests")
def registered_encoder(texts):
    return CountingEncoder()(texts)


def test_a_plain_function_encoder_is_refused_at_save_before_anything_is_written(
    tmp_path,
):
    text = kd.FrozenTextConditioning(plain_encoder)
    model = kd.DiffusionModel(
        conv_denoiser(context_shape=(TOKENS, WIDTH)), conditioning=text
    )
    message = (
        r"`encoder`.*register_keras_serializable.*a plain function.*"
        r"Received: encoder=<function plain_encoder"
    )
    for save in (model.save, lambda path: files.save_model(model, path)):
        with pytest.raises(TypeError, match=message):
            save(tmp_path / "model.keras")
        assert os.listdir(tmp_path) == []
    # A registered function is rebuilt from its name.
    text = kd.FrozenTextConditioning(registered_encoder)
    again = kd.FrozenTextConditioning.from_config(text.get_config())
    assert again.encoder is registered_encoder
