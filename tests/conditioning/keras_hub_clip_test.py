"""keras-hub's CLIP as a frozen text encoder: a tiny random one (a few words,
a tiny BPE merges list, 2 layers, width 16; no download) trains a text
model whose encoder stays bit for bit, encodes each caption once, and saves
and loads with the same images, given whole or by a (local) preset."""

import json
import zipfile

import keras
import numpy as np
import pytest

import keras_diffusion as kd
from keras_diffusion.conditioning import keras_hub_clip
from tests.denoisers import conv_denoiser, tiny_unet

keras_hub = pytest.importorskip("keras_hub")

WORDS = ["red", "blue", "cat", "dog", "face", "heart"]
CAPTIONS = ["red heart", "blue heart", "cat face", "dog face"]
LENGTH, WIDTH = 6, 16
SAMPLER = kd.EulerSampler(num_steps=2)


def tiny_tokenizer(**options):
    """A `CLIPTokenizer` of `WORDS`: each word's letters, merged left to
    right into the word (the last letter with CLIP's `</w>`)."""
    tokens, merges = [], []
    for word in WORDS:
        pieces = list(word[:-1]) + [word[-1] + "</w>"]
        tokens += pieces
        merged = pieces[0]
        for piece in pieces[1:]:
            merges.append(f"{merged} {piece}")
            merged += piece
            tokens.append(merged)
    tokens = list(dict.fromkeys(tokens)) + ["<|endoftext|>", "<|startoftext|>"]
    vocabulary = {token: i + 1 for i, token in enumerate(tokens)}  # 0 pads
    return keras_hub.models.CLIPTokenizer(
        vocabulary=vocabulary, merges=list(dict.fromkeys(merges)), **options
    )


def tiny_text_encoder(tokenizer):
    return keras_hub.models.CLIPTextEncoder(
        vocabulary_size=tokenizer.vocabulary_size() + 1,
        embedding_dim=WIDTH,
        hidden_dim=WIDTH,
        num_layers=2,
        num_heads=2,
        intermediate_dim=2 * WIDTH,
        max_sequence_length=LENGTH,
    )


def _model(conditioning):
    model = kd.DiffusionModel(
        conv_denoiser(context_shape=(LENGTH, WIDTH)),
        kd.EDMSchedule(),
        conditioning=conditioning,
        ema_decay=0.5,
        seed=0,
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    return model


def _generate(model):
    return model.generate(
        2,
        prompts=["red heart", "dog face"],
        guidance_scale=2.0,
        sampler=SAMPLER,
        seed=1,
        verbose=0,
    )


@pytest.fixture(scope="module")
def trained():
    """A text model on a tiny random CLIP given as objects, fitted two
    epochs of two steps, the texts its encoder was given recorded."""
    tokenizer = tiny_tokenizer()
    conditioning = keras_hub_clip.clip_conditioning(
        text_encoder=tiny_text_encoder(tokenizer), tokenizer=tokenizer, dropout=0.25
    )
    encoder = conditioning.encoder
    seen, call = [], encoder.call

    def counting_call(texts):
        seen.extend(text.decode() for text in texts.numpy())
        return call(texts)

    encoder.call = counting_call
    model = _model(conditioning)
    before = [v.numpy() for v in encoder.weights]
    images = np.random.default_rng(0).uniform(-1, 1, (8, 8, 8, 1)).astype("float32")
    model.fit(images, np.array(CAPTIONS * 2), batch_size=4, epochs=2, verbose=0)
    return model, before, seen


def test_the_clip_encoder_stays_frozen_and_encodes_each_caption_once(trained):
    model, before, seen = trained
    encoder = model.conditioning.encoder
    assert encoder.weights  # tracked: saved with the model
    for weight, value in zip(encoder.weights, before, strict=True):
        np.testing.assert_array_equal(weight.numpy(), value)
    frozen = {id(v) for v in encoder.weights}
    assert not frozen & {id(v) for v in model.trainable_variables}
    assert not frozen & {id(v) for v in model.averaged_variables}
    assert sorted(seen) == sorted(CAPTIONS)  # 2 epochs: once each
    images = _generate(model)
    assert images.shape == (2, 8, 8, 1) and np.isfinite(images).all()
    assert sorted(seen) == sorted(CAPTIONS)  # the prompts were cached


def test_a_clip_text_model_saves_whole_and_loads_with_the_same_images(
    trained, tmp_path
):
    model = trained[0]
    path = str(tmp_path / "clip.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    # The trained model's cache encoded each caption in a batch of another
    # size than the loaded one's: its embeddings differ in the last bits.
    np.testing.assert_allclose(_generate(loaded), _generate(model), atol=1e-5)
    assert not loaded.conditioning.trainable_variables
    # LoRA adapts the denoiser alone: the encoder stays frozen.
    adapted = kd.enable_lora(loaded, rank=2)
    assert adapted.conditioning.weights
    assert not adapted.conditioning.trainable_variables
    frozen = {id(v) for v in adapted.conditioning.weights}
    assert not frozen & {id(v) for v in adapted.trainable_variables}


def tiny_preset(folder):
    """A local keras-hub preset folder of a tiny random `CLIPBackbone` (a
    vision encoder of one layer on 8x8 images) and `tiny_tokenizer`,
    padding with its end token (as Stable Diffusion's CLIP does)."""
    tokenizer = tiny_tokenizer(pad_with_end_token=True)
    backbone = keras_hub.models.CLIPBackbone(
        vision_encoder=keras_hub.models.CLIPVisionEncoder(
            patch_size=4,
            hidden_dim=8,
            num_layers=1,
            num_heads=2,
            intermediate_dim=16,
            image_shape=(8, 8, 3),
        ),
        text_encoder=tiny_text_encoder(tokenizer),
        projection_dim=8,
    )
    backbone.save_to_preset(str(folder))
    tokenizer.save_to_preset(str(folder))
    return str(folder)


def test_a_preset_encoder_is_saved_by_name(tmp_path):
    preset = tiny_preset(tmp_path / "preset")
    model = _model(keras_hub_clip.clip_conditioning(preset))
    path = str(tmp_path / "clip.keras")
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    encoder = config["config"]["conditioning"]["config"]["encoder"]["config"]
    assert encoder["preset"] == preset and "text_encoder" not in encoder
    loaded = keras.saving.load_model(path)
    # The trained model's cache encoded each caption in a batch of another
    # size than the loaded one's: its embeddings differ in the last bits.
    np.testing.assert_allclose(_generate(loaded), _generate(model), atol=1e-5)


def test_the_documented_presets_are_keras_hubs():
    assert set(keras_hub_clip.CLIP_PRESETS) == set(
        keras_hub.models.CLIPBackbone.presets
    )
    with pytest.raises(ValueError, match="preset='clip_vit_nope'"):
        keras_hub_clip.check_preset("clip_vit_nope")


def test_merge_lora_keeps_the_clip_encoder_frozen():
    tokenizer = tiny_tokenizer()
    conditioning = keras_hub_clip.clip_conditioning(
        text_encoder=tiny_text_encoder(tokenizer), tokenizer=tokenizer
    )
    unet = tiny_unet(widths=(4,), attention_levels=(True,), cross_attention_dim=WIDTH)
    model = kd.DiffusionModel(unet, kd.EDMSchedule(), conditioning=conditioning)
    merged = kd.merge_lora(kd.enable_lora(model, rank=2))
    assert merged.conditioning.weights
    assert not merged.conditioning.trainable_variables
    for a, b in zip(merged.conditioning.weights, conditioning.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
