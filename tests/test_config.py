"""The config loader: every mistake names the file and the key."""

import pytest
import yaml

from nmt.config import Config, builtin_configs, load_config, resolve_config_path
from nmt.errors import NMTError


def write(tmp_path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


MINIMAL = "data: {src_lang: de, tgt_lang: en}\n"


def test_minimal_config_gets_defaults(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL))
    assert isinstance(cfg, Config)
    assert cfg.model.decoder.style == "luong" and cfg.train.batch_size == 64


@pytest.mark.parametrize(
    "text,message",
    [
        (MINIMAL + "model: {atention: {type: dot}}\n", "model.atention: unknown key"),
        (MINIMAL + "train: {max_steps: many}\n", "train.max_steps: expected int"),
        (MINIMAL + "model: {attention: {type: fancy}}\n", "model.attention.type: 'fancy' is not one of"),
        ("data: {src_lang: de}\n", "data.tgt_lang: required key is missing"),
        ("tokenizer: {}\n", "data: required key is missing"),
        (MINIMAL + "train: [1, 2]\n", "train: expected a mapping"),
        (
            MINIMAL + "model: {attention: {type: dot}, decoder: {hidden: 100}}\n",
            "decoder.hidden (100) == 2 * encoder",
        ),
        (MINIMAL + "train: {batch_size: 0}\n", "train.batch_size: must be at least 1"),
        (MINIMAL + "model: {decoder: {style: bahdanau, input_feeding: true}}\n", "input feeding belongs"),
        ("data: {src_lang: de, tgt_lang: en\n", "not valid YAML"),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(NMTError) as error:
        load_config(path)
    assert str(path) in str(error.value)
    assert message in str(error.value)


def test_set_overrides_any_field_with_yaml_typed_values(tmp_path):
    cfg = load_config(
        write(tmp_path, MINIMAL),
        [
            "model.attention.type=bahdanau",
            "train.max_steps=7",
            "train.lr=1e-4",
            "model.tie_embeddings=true",
            "model.embedding=512",
        ],
    )
    assert cfg.model.attention.type == "bahdanau"
    assert cfg.train.max_steps == 7 and cfg.train.lr == pytest.approx(1e-4)
    assert cfg.model.tie_embeddings is True


def test_set_without_equals_is_an_error(tmp_path):
    with pytest.raises(NMTError, match="expected section.key=value"):
        load_config(write(tmp_path, MINIMAL), ["train.max_steps"])


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL), ["model.attention.type=local_p"])
    again = write(tmp_path, cfg.to_yaml())
    assert load_config(again) == cfg


def test_builtin_configs_all_validate_and_resolve_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # from any directory
    names = [p.name for p in builtin_configs()]
    assert {"iwslt-luong-dot.yaml", "multi30k-luong-dot.yaml", "toy-luong.yaml"} <= set(names)
    for name in names:
        cfg = load_config(name)
        assert yaml.safe_load(cfg.to_yaml())["data"]["src_lang"]
    assert resolve_config_path("toy-luong").name == "toy-luong.yaml"


def test_iwslt_config_reads_the_parquet_export():
    cfg = load_config("iwslt-luong-dot.yaml")
    assert cfg.data.format == "hf" and cfg.data.hf_path == "parquet"
    assert "iwslt2017@refs/convert/parquet" in cfg.data.hf_data_files["train"]
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("de", "en")


def test_unknown_config_name_lists_the_builtins():
    with pytest.raises(NMTError, match="toy-luong.yaml"):
        resolve_config_path("no-such-config.yaml")
