"""The position extension travels with the checkpoint (`bert4long.checkpoints.position_record`): written by pretrain, extend and
the Hugging Face writer, restored by `build_transformer_model` and every command, refused when contradicted, and
ignored by the readers of other libraries."""
import json

import numpy as np
import pytest

from bert4long.checkpoints.position_record import RECORD_KEY
from bert4long.models import build_transformer_model
from bert4long.testing import TINY_CONFIG

N = TINY_CONFIG["max_position_embeddings"]   # 16 trained positions; the runs below read 24


def position_layer(model):
    return model.get_layer("Embedding-Position")


@pytest.fixture(scope="module")
def pretrained(tiny_bert, tmp_path_factory):
    """`pretrain --hierarchical-position 0.3` at 24 tokens (more than the 16 trained): its --out folder."""
    from bert4long.cli import main

    config, checkpoint, _ = tiny_bert
    root = tmp_path_factory.mktemp("recorded")
    corpus = root / "corpus.txt"
    corpus.write_text(" ".join(f"w{i % 40}" for i in range(600)))
    assert main(["pretrain", "--config", config, "--checkpoint", checkpoint, "--corpus", str(corpus), "--seq-len",
                 "24", "--hierarchical-position", "0.3", "--batch-size", "2", "--steps", "2", "--save-every", "2",
                 "--no-xla", "--quiet", "--eval-sequences", "1", "--head-steps", "0", "--out",
                 str(root / "run")]) == 0
    return root


@pytest.mark.slow
def test_pretrain_records_the_extension_and_the_builder_restores_it(pretrained):
    run = pretrained / "run"
    config = json.loads((run / "bert_config.json").read_text())
    assert config["max_position_embeddings"] == N   # hierarchical positions add no rows
    assert config[RECORD_KEY] == {"method": "hierarchical", "alpha": 0.3, "trained_positions": N}
    config_path, prefix = str(run / "bert_config.json"), str(run / "bert_model.ckpt")
    restored = position_layer(build_transformer_model(config_path, prefix))   # nothing passed: the recorded one
    assert (restored.method, restored.alpha, restored.max_length) == ("hierarchical", 0.3, N * N)
    same = position_layer(build_transformer_model(config_path, prefix, hierarchical_position=0.3))
    assert same.alpha == 0.3
    with pytest.raises(ValueError, match=r"records the position extension hierarchical \(alpha 0\.3\), but "
                                         r"hierarchical \(alpha 0\.4\) was asked.*override_position_extension=True"):
        build_transformer_model(config_path, prefix, hierarchical_position=True)
    with pytest.raises(ValueError, match=r"but copy \(to 64 positions\) was asked"):
        build_transformer_model(config_path, prefix, position_extension="copy", position_extension_length=64)
    with pytest.raises(ValueError, match=r"but none \(the trained positions only\) was asked"):
        build_transformer_model(config_path, prefix, hierarchical_position=False)
    mine = position_layer(build_transformer_model(config_path, prefix, hierarchical_position=0.4,
                                                  override_position_extension=True))
    assert mine.alpha == 0.4


@pytest.mark.slow
def test_every_command_reads_the_recorded_extension(pretrained, capsys):
    """finetune from the pretrained run, evaluate, info and export with no position option; a different one is
    an error naming both and the fix, and --override-position-extension builds with it."""
    import keras

    from bert4long.cli import main

    run, checkpoint = pretrained / "run", str(pretrained / "run" / "bert_model.ckpt")
    corpus = str(pretrained / "corpus.txt")
    capsys.readouterr()
    assert main(["info", str(run)]) == 0
    assert f"up to {N * N} tokens with the position extension its config records, hierarchical (alpha 0.3)" \
        in capsys.readouterr().out
    assert main(["evaluate", "--checkpoint", checkpoint, "--corpus", corpus, "--seq-len", "24",
                 "--max-sequences", "2"]) == 0
    assert "positions: hierarchical (alpha 0.3), as recorded in" in capsys.readouterr().err
    assert main(["evaluate", "--checkpoint", checkpoint, "--corpus", corpus, "--seq-len", "24",
                 "--hierarchical-position", "0.2"]) == 1
    error = capsys.readouterr().err
    assert "records the position extension hierarchical (alpha 0.3), but hierarchical (alpha 0.2)" in error
    assert "--override-position-extension" in error
    assert main(["evaluate", "--checkpoint", checkpoint, "--corpus", corpus, "--seq-len", "24", "--max-sequences",
                 "2", "--hierarchical-position", "0.2", "--override-position-extension"]) == 0

    train = pretrained / "train.jsonl"
    train.write_text("".join(json.dumps({"text": " ".join(f"w{(i * 3 + j) % 30}" for j in range(30)),
                                         "label": "ab"[i % 2]}) + "\n" for i in range(4)))
    cls = str(pretrained / "cls")
    assert main(["finetune", "--checkpoint", checkpoint, "--train", str(train), "--seq-len", "24", "--batch-size",
                 "2", "--steps", "1", "--out", cls, "--no-xla", "--quiet"]) == 0
    layer = position_layer(keras.models.load_model(f"{cls}/classifier.keras"))
    assert (layer.method, layer.alpha) == ("hierarchical", 0.3)
    assert json.loads((pretrained / "cls" / "finetune.json").read_text())["model"]["hierarchical_position"] == 0.3
    assert main(["export", "--run", cls, "--out", str(pretrained / "served_cls")]) == 0
    assert main(["export", "--checkpoint", checkpoint, "--out", str(pretrained / "served")]) == 0
    assert "sequence_output" in capsys.readouterr().out


@pytest.mark.slow
def test_extend_records_a_materialized_table(tiny_bert, pretrained, tmp_path, capsys):
    """`extend` writes rows, so a loader applies nothing more; extending a checkpoint trained with another
    extension is refused (its alpha is the default)."""
    from bert4long.checkpoints.extension import extend_checkpoint
    from bert4long.cli import main

    config, checkpoint, _ = tiny_bert
    long_config, prefix = extend_checkpoint(config, checkpoint, "copy", 40, str(tmp_path / "long"))
    assert json.load(open(long_config))[RECORD_KEY] == {"method": "copy", "length": 40, "trained_positions": N,
                                                        "materialized": True}
    assert position_layer(build_transformer_model(long_config, prefix)).max_length == 40   # read as it is
    run = pretrained / "run"
    assert main(["extend", "--checkpoint", str(run / "bert_model.ckpt"), "--method", "copy", "--max-position",
                 "48", "--out", str(tmp_path / "copied")]) == 1
    assert "records the position extension hierarchical (alpha 0.3), the one this checkpoint was trained with" \
        in capsys.readouterr().err
    assert main(["extend", "--checkpoint", str(run / "bert_model.ckpt"), "--method", "hierarchical",
                 "--max-position", "48", "--out", str(tmp_path / "stretched")]) == 0
    assert json.loads((tmp_path / "stretched" / "bert_config.json").read_text())[RECORD_KEY]["alpha"] == 0.3


@pytest.mark.slow
def test_other_readers_ignore_the_record(pretrained):
    """Google's BertConfig.from_dict sets every key as an attribute (google-research/bert modeling.py); the
    keys its BertModel reads keep their meaning. transformers' BertConfig keeps the extra key and builds."""
    path = pretrained / "run" / "bert_config.json"
    config = json.loads(path.read_text())

    class GoogleBertConfig:   # modeling.BertConfig.from_dict: config.__dict__[key] = value for every key
        def __init__(self, values):
            self.__dict__.update(values)

    google = GoogleBertConfig(config)
    for key, kind in (("vocab_size", int), ("hidden_size", int), ("num_hidden_layers", int),
                      ("num_attention_heads", int), ("intermediate_size", int), ("hidden_act", str),
                      ("hidden_dropout_prob", float), ("attention_probs_dropout_prob", float),
                      ("max_position_embeddings", int), ("type_vocab_size", int), ("initializer_range", float)):
        assert isinstance(getattr(google, key), kind), key
    assert google.max_position_embeddings == N
    transformers = pytest.importorskip("transformers")
    hf = transformers.BertConfig.from_json_file(str(path))
    assert hf.max_position_embeddings == N and getattr(hf, RECORD_KEY)["alpha"] == 0.3
    pytest.importorskip("torch")
    assert transformers.BertModel(hf).embeddings.position_embeddings.weight.shape[0] == N


def test_a_hugging_face_folder_bert4long_writes_records_it(tmp_path, rng, capsys):
    """BigBird (a Hugging Face family bert4long writes as config.json + model.safetensors): the record is in
    config.json, transformers still loads the folder, and bert4long restores the extension from it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf = transformers.BigBirdConfig(vocab_size=60, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                    intermediate_size=37, max_position_embeddings=32, block_size=4,
                                    num_random_blocks=1, attention_type="original_full")
    torch.manual_seed(0)
    transformers.BigBirdModel(hf).save_pretrained(tmp_path / "source")
    builder = build_transformer_model(checkpoint_path=str(tmp_path / "source"), hierarchical_position=0.3,
                                      return_keras_model=False)
    builder.save_weights_as_checkpoint(str(tmp_path / "written"))
    written = json.loads((tmp_path / "written" / "config.json").read_text())
    assert written[RECORD_KEY] == {"method": "hierarchical", "alpha": 0.3, "trained_positions": 32}
    transformers.BigBirdModel.from_pretrained(tmp_path / "written")
    from bert4long.cli import main

    assert main(["info", str(tmp_path / "written")]) == 0
    assert "up to 1024 tokens with the position extension its config records" in capsys.readouterr().out
    restored = build_transformer_model(checkpoint_path=str(tmp_path / "written"))
    assert position_layer(restored).alpha == 0.3
    with pytest.raises(ValueError, match="records the position extension hierarchical"):
        build_transformer_model(checkpoint_path=str(tmp_path / "written"), hierarchical_position=0.2)
    ids = rng.integers(5, 60, (1, 40)).astype("int32")   # longer than the 32 trained positions
    assert restored.predict([ids, np.zeros_like(ids)], verbose=0).shape == (1, 40, 32)
