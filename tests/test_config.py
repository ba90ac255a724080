"""The config loader: every mistake names the file and the key."""

import pytest
import yaml

from nmt.config import (
    Config,
    DecodeConfig,
    builtin_configs,
    decode_settings,
    load_config,
    resolve_config_path,
)
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


@pytest.mark.parametrize(
    "item,message",
    [
        ("data.src_lang='\n", '--set "data.src_lang=\'\\n": not valid YAML'),
        ("x\n=1", "--set 'x\\n=1': the top level has no key 'x'"),
        ("=\n", "--set '=\\n': expected section.key=value"),
    ],
)
def test_a_set_with_a_newline_is_one_error_line(tmp_path, item, message):
    with pytest.raises(NMTError) as error:
        load_config(write(tmp_path, MINIMAL), [item])
    assert str(error.value).startswith(message) and "\n" not in str(error.value), str(error.value)


def test_a_config_name_too_long_for_a_path_is_not_found(tmp_path):
    with pytest.raises(NMTError, match="config not found"):
        load_config("y" * 400)


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


# The built-in configs share bases (nmt/configs/_*.yaml). Before they did, each was written whole;
# these are the values each of them resolved to then, checked by hand against those files: a
# family's first config by its settings that differ from the defaults, and each other member by
# what sets it apart from the first. Every key not named here must be the default, or equal.
PARQUET = "hf://datasets/IWSLT/iwslt2017@refs/convert/parquet/iwslt2017-en-de/{}/*.parquet"
HEADS = {
    "multi30k-luong-dot.yaml": {
        **{"data.src_lang": "de", "data.tgt_lang": "en", "data.dir": "data/multi30k"},
        **{"data.valid": "val", "data.test": "test_2016_flickr", "data.max_len": 80},
        "model.decoder.input_feeding": True,
        **{"train.lr": 0.003, "train.schedule": "budget", "train.min_lr": 0.0, "train.label_smoothing": 0.1},
        **{"train.max_time": 1170.0, "train.max_steps": 20000, "train.valid_subset": 500},
        **{"train.log_every": 100, "train.valid_every": 250, "train.valid_share": 0.05},
        **{"decode.beam": 5, "decode.max_len": 100, "decode.alpha": 1.0},
    },
    "iwslt-luong-dot.yaml": {
        **{"data.src_lang": "de", "data.tgt_lang": "en", "data.format": "hf", "data.dir": "data/iwslt2017"},
        **{"data.valid": "validation", "data.hf_path": "parquet"},
        "data.hf_data_files": {split: PARQUET.format(split) for split in ("train", "validation", "test")},
        **{"tokenizer.vocab_size": 16000, "model.embedding": 512, "model.decoder.input_feeding": True},
        **{"model.encoder.hidden": 512, "model.encoder.layers": 2},
        **{"model.decoder.hidden": 1024, "model.decoder.layers": 2},
        **{"train.max_steps": 100000, "train.log_every": 100, "train.valid_every": 2000},
        **{"decode.beam": 5, "decode.max_len": 150, "decode.alpha": 0.6},
    },
    "toy-luong.yaml": {
        **{"data.src_lang": "human", "data.tgt_lang": "iso", "data.dir": "data/toy", "data.max_len": 60},
        **{"tokenizer.vocab_size": 200, "model.embedding": 64, "model.dropout": 0.1},
        **{"model.encoder.hidden": 128, "model.decoder.hidden": 256, "model.attention.type": "general"},
        **{"train.lr": 0.003, "train.max_steps": 1500, "train.device": "cpu"},
        **{"decode.batch_size": 250, "decode.max_len": 24},
    },
}
HUB = {
    **{"data.format": "hf", "data.hf_path": "bentrevett/multi30k", "data.dir": "data/multi30k-hub"},
    **{"data.valid": "validation", "data.test": "test"},
}
MEMBERS = {
    "multi30k-en-de.yaml": ("multi30k-luong-dot.yaml", {"data.src_lang": "en", "data.tgt_lang": "de"}),
    "multi30k-en-fr.yaml": ("multi30k-luong-dot.yaml", {"data.src_lang": "en", "data.tgt_lang": "fr"}),
    "multi30k-small.yaml": (
        "multi30k-luong-dot.yaml",
        {"model.encoder.hidden": 128, "model.decoder.hidden": 256},
    ),
    "multi30k-hub-de-en.yaml": ("multi30k-luong-dot.yaml", HUB),
    "multi30k-hub-en-de.yaml": (
        "multi30k-luong-dot.yaml",
        {**HUB, "data.src_lang": "en", "data.tgt_lang": "de"},
    ),
    "iwslt-en-de.yaml": ("iwslt-luong-dot.yaml", {"data.src_lang": "en", "data.tgt_lang": "de"}),
    "toy-bahdanau.yaml": (
        "toy-luong.yaml",
        {
            "model.decoder.style": "bahdanau",
            "model.decoder.bridge": "backward",
            "model.decoder.output": "maxout",
        }
        | {"model.attention.type": "bahdanau"},
    ),
}


def resolved(name: str) -> dict:
    """A config's resolved values as {"section.key": value}, each with its type (1 != 1.0)."""
    from nmt.rundir import flatten

    return {key: (type(value), value) for key, value in flatten(load_config(name).to_dict()).items()}


def expected(values: dict, start: dict) -> dict:
    return start | {key: (type(value), value) for key, value in values.items()}


def test_builtin_configs_resolve_to_what_they_were_before_sharing_bases():
    from nmt.config import DataConfig
    from nmt.rundir import flatten

    defaults = flatten(Config(data=DataConfig(src_lang="", tgt_lang="")).to_dict())
    assert set(HEADS) | set(MEMBERS) == {p.name for p in builtin_configs()}
    for head, values in HEADS.items():
        assert resolved(head) == expected(values, expected(defaults, {})), head
    for member, (head, values) in MEMBERS.items():
        assert resolved(member) == expected(values, resolved(head)), member


def test_builtin_configs_round_trip_and_bases_are_not_listed():
    from nmt.config import BUILTIN_DIR, config_from_dict

    bases = sorted(p.name for p in BUILTIN_DIR.glob("_*.yaml"))
    assert bases == ["_multi30k.yaml", "_toy.yaml"]
    assert not set(bases) & {p.name for p in builtin_configs()}
    for path in builtin_configs():
        cfg = load_config(path.name)
        assert config_from_dict(yaml.safe_load(cfg.to_yaml())) == cfg


def write_at(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_base_chain_merges_section_by_section_nearest_file_first(tmp_path):
    write_at(tmp_path / "bases/root.yaml", MINIMAL + "train: {lr: 0.5, max_steps: 9, seed: 4}\n")
    write_at(tmp_path / "bases/mid.yaml", "base: root.yaml\ntrain: {max_steps: 8}\nmodel: {dropout: 0.2}\n")
    top = write_at(tmp_path / "runs/top.yaml", "base: ../bases/mid.yaml\ntrain: {seed: 3}\n")
    cfg = load_config(top)
    assert (cfg.train.lr, cfg.train.max_steps, cfg.train.seed) == (0.5, 8, 3)
    assert cfg.model.dropout == 0.2 and cfg.data.src_lang == "de"


def test_a_base_may_be_a_builtin_name_and_set_applies_after_the_merge(tmp_path):
    own = write(tmp_path, "base: toy-luong\ntrain: {max_steps: 7, lr: 0.01}\n")
    cfg = load_config(own, ["train.max_steps=5", "model.attention.type=dot"])
    assert (cfg.train.max_steps, cfg.train.lr, cfg.model.attention.type) == (5, 0.01, "dot")
    assert cfg.model.encoder.hidden == 128 and cfg.decode.batch_size == 250  # from _toy.yaml
    assert load_config(own, ["train.max_steps=5", "model.attention.type=dot"]) == load_config(
        "toy-luong", ["train.max_steps=5", "train.lr=0.01", "model.attention.type=dot"]
    )


def test_a_mapping_value_is_replaced_whole_not_merged(tmp_path):
    hf = "data: {src_lang: de, tgt_lang: en, format: hf, hf_path: json, hf_data_files: {train: a, test: b}}\n"
    write_at(tmp_path / "base.yaml", hf)
    own = write(tmp_path, "base: base.yaml\ndata: {hf_data_files: {train: c}}\n")
    assert load_config(own).data.hf_data_files == {"train": "c"}


@pytest.mark.parametrize(
    "files,message",
    [
        ({"c.yaml": "base: c.yaml\n" + MINIMAL}, "base: c.yaml makes a cycle (c.yaml -> c.yaml)"),
        (
            {"c.yaml": "base: b.yaml\n", "b.yaml": "base: c.yaml\n" + MINIMAL},
            "b.yaml: base: c.yaml makes a cycle (c.yaml -> b.yaml -> c.yaml)",
        ),
        ({"c.yaml": "base: gone.yaml\n" + MINIMAL}, "c.yaml: base: gone.yaml not found"),
        ({"c.yaml": "base: b.yaml\n", "b.yaml": "- a list\n"}, "b.yaml (the base of"),
        ({"c.yaml": "base: [b.yaml]\n" + MINIMAL}, "c.yaml: base: expected a config file or built-in name"),
        ({"c.yaml": f"base: {'x' * 300}\n" + MINIMAL}, f"c.yaml: base: {'x' * 200} not found"),  # too long
        ({"c.yaml": 'base: "a\\nb"\n' + MINIMAL}, "c.yaml: base: 'a\\nb' not found"),
    ],
)
def test_base_errors_are_one_line_naming_the_file(tmp_path, files, message):
    for name, text in files.items():
        write_at(tmp_path / name, text)
    with pytest.raises(NMTError) as error:
        load_config(tmp_path / "c.yaml")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_key_error_inside_a_base_names_the_file_and_its_bases(tmp_path):
    write_at(tmp_path / "b.yaml", MINIMAL + "train: {max_steps: many}\n")
    with pytest.raises(NMTError, match=r"c\.yaml \(with base b\.yaml\): train\.max_steps: expected int"):
        load_config(write(tmp_path, "base: b.yaml\n"))


def test_a_bad_base_fails_the_command_with_one_line_and_exit_2(tmp_path):
    from typer.testing import CliRunner

    from nmt.cli import app

    config = write(tmp_path, "base: c.yaml\n" + MINIMAL)
    result = CliRunner().invoke(app, ["configs", "--show", str(config)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines() == [
        f"error: {config}: base: c.yaml makes a cycle (c.yaml -> c.yaml); remove one of the bases"
    ]


@pytest.mark.parametrize("penalty", ["avg", "gnmt"])
def test_a_length_penalty_named_without_its_alpha_is_refused(tmp_path, penalty):
    why = f"decode.length_penalty: {penalty} does nothing while decode.alpha is 0; set alpha too"
    path = write(tmp_path, MINIMAL + f"decode: {{length_penalty: {penalty}}}\n")
    with pytest.raises(NMTError, match=f"{path}: {why}"):
        load_config(path)
    with pytest.raises(NMTError, match=why):
        load_config("toy-luong", [f"decode.length_penalty={penalty}"])
    with pytest.raises(NMTError, match=f"command line: {why}"):
        decode_settings(DecodeConfig(), {"length_penalty": penalty, "alpha": None}, "command line")


def test_a_length_penalty_with_an_alpha_given_or_the_models_is_accepted(tmp_path):
    assert (
        load_config(write(tmp_path, MINIMAL + "decode: {length_penalty: avg, alpha: 0.6}\n")).decode.alpha
        == 0.6
    )
    explicit_zero = load_config(write(tmp_path, MINIMAL + "decode: {length_penalty: gnmt, alpha: 0}\n"))
    assert explicit_zero.decode.alpha == 0  # a sweep's alpha 0 says what it means
    assert load_config("toy-luong").decode.length_penalty == "gnmt"  # the default, alpha 0: untouched
    assert decode_settings(DecodeConfig(alpha=0.6), {"length_penalty": "avg"}, "command line").alpha == 0.6
    assert decode_settings(DecodeConfig(alpha=0.6), {"alpha": 0.0}, "command line").alpha == 0.0
