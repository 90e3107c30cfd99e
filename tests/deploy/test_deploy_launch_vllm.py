"""launch_vllm_service.sh: the seed's parameter combinations, checked with DRY_RUN=1."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._support import ENGINE_DIR, RunScript, env_pairs, flag

LAUNCH = ENGINE_DIR / "launch_vllm_service.sh"
SEVEN = ("port_number", "model_name", "hw_mode", "parallel_number", "block_size", "max_num_seqs")
# /proc/cpuinfo's flags of the CPUs CI runs on; GENMESH_CPUINFO points the script at a file of these, so
# the dtype it picks does not depend on the machine the tests run on.
AVX2_ONLY = "fpu sse4_2 avx avx2 fma"  # the AMD EPYC (AVX2) machines: bf16 is emulated there
ZEN4 = "fpu sse4_2 avx avx2 fma avx512f avx512_bf16"  # AVX-512 BF16, no AMX
SAPPHIRE_RAPIDS = "fpu sse4_2 avx avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile"
AMX_ONLY = "fpu avx2 amx_bf16 amx_tile"


def fake_cpuinfo(tmp_path: Path, flags: str) -> str:
    """A two-CPU /proc/cpuinfo with these flags (and a "vmx flags" line, which is not "flags")."""
    path = tmp_path / "cpuinfo"
    cpu = "processor\t: {n}\nmodel name\t: Test CPU\nflags\t\t: {flags}\nvmx flags\t: vnmi ept\n\n"
    path.write_text(cpu.format(n=0, flags=flags) + cpu.format(n=1, flags=flags))
    return str(path)


def test_help_documents_all_seven_parameters(run_script: RunScript) -> None:
    out = run_script(LAUNCH, "--help").ok().stdout
    for name in ("port", "model", "hw_mode", "parallel_number", "block_size", "max_num_seqs", "max_seq_len_to_capture"):
        assert name in out
    for var in ("RUNTIME", "DRY_RUN", "VLLM_CPU_KVCACHE_SPACE", "HUGGINGFACEHUB_API_TOKEN", "HF_TOKEN", "VLLM_DTYPE"):
        assert var in out
    assert "hpu 8" in out
    for words in ("avx512_bf16", "amx_bf16", "float32", "GENMESH_CPUINFO"):
        assert words in out


def test_default_is_cpu_on_port_8008_published_without_host_network(run_script: RunScript, tmp_path: Path) -> None:
    argv = run_script(LAUNCH, GENMESH_CPUINFO=fake_cpuinfo(tmp_path, SAPPHIRE_RAPIDS)).ok().argv()
    assert argv[:3] == ["docker", "run", "-d"]
    assert flag(argv, "-p") == "8008:80"
    assert not any(word.startswith("--network") or word == "--net=host" for word in argv), argv
    image_at = argv.index("opea/vllm:cpu")
    server = argv[image_at + 1 :]
    assert flag(server, "--port") == "80"
    assert flag(server, "--host") == "0.0.0.0"
    assert flag(server, "--model") == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert flag(server, "--dtype") == "bfloat16"
    assert "--enforce-eager" not in argv
    assert env_pairs(argv)["VLLM_CPU_KVCACHE_SPACE"] == "4"


def test_host_network_listens_on_the_port_itself(run_script: RunScript) -> None:
    argv = run_script(LAUNCH, "8010", DOCKER_NETWORK="host").ok().argv()
    assert "--network=host" in argv
    assert "-p" not in argv
    assert flag(argv[argv.index("opea/vllm:cpu") :], "--port") == "8010"


def test_kv_cache_space_comes_from_the_environment(run_script: RunScript) -> None:
    argv = run_script(LAUNCH, VLLM_CPU_KVCACHE_SPACE="12").ok().argv()
    assert env_pairs(argv)["VLLM_CPU_KVCACHE_SPACE"] == "12"
    run_script(LAUNCH, VLLM_CPU_KVCACHE_SPACE="40GB").fails("VLLM_CPU_KVCACHE_SPACE")


def test_seed_gaudi_eight_cards(run_script: RunScript) -> None:
    argv = run_script(LAUNCH, "8008", "meta-llama/Meta-Llama-3-70b", "hpu", "8").ok().argv()
    assert "--runtime=habana" in argv
    assert env_pairs(argv)["HABANA_VISIBLE_DEVICES"] == "all"
    assert flag(argv, "-p") == "8008:80"
    server = argv[argv.index("opea/vllm:hpu") + 1 :]
    assert flag(server, "--model") == "meta-llama/Meta-Llama-3-70b"
    assert flag(server, "--tensor-parallel-size") == "8"
    assert flag(server, "--block-size") == "128"
    assert flag(server, "--max-num-seqs") == "256"
    assert flag(server, "--max-seq-len-to-capture") == "2048"


def test_seed_gaudi_single_card(run_script: RunScript) -> None:
    argv = run_script(LAUNCH, "8008", "meta-llama/Meta-Llama-3-8B-Instruct", "hpu", "1").ok().argv()
    assert flag(argv, "--tensor-parallel-size") == "1"


def test_all_seven_parameters_reach_the_server_on_hpu(run_script: RunScript) -> None:
    argv = run_script(LAUNCH, "9100", "org/model", "hpu", "4", "64", "32", "4096").ok().argv()
    assert flag(argv, "-p") == "9100:80"
    server = argv[argv.index("opea/vllm:hpu") + 1 :]
    assert flag(server, "--model") == "org/model"
    assert flag(server, "--tensor-parallel-size") == "4"
    assert flag(server, "--block-size") == "64"
    assert flag(server, "--max-num-seqs") == "32"
    assert flag(server, "--max-seq-len-to-capture") == "4096"
    assert "--enforce-eager" not in server  # graphs on: max_seq_len_to_capture means something
    eager = run_script(LAUNCH, "9100", "org/model", "hpu", "4", "64", "32", "4096", ENFORCE_EAGER="1").ok().argv()
    assert "--enforce-eager" in eager


def test_all_seven_parameters_on_cpu(run_script: RunScript) -> None:
    result = run_script(LAUNCH, "9101", "org/model", "cpu", "2", "32", "16", "1024").ok()
    argv = result.argv()
    assert flag(argv, "-p") == "9101:80"
    assert flag(argv, "--tensor-parallel-size") == "2"
    assert flag(argv, "--block-size") == "32"
    assert flag(argv, "--max-num-seqs") == "16"
    # vLLM-CPU has no such flag (no captured graphs): reported, not passed.
    assert "--max-seq-len-to-capture" not in argv
    assert "max_seq_len_to_capture=1024" in result.stderr


def test_xpu_follows_ipex_llm(run_script: RunScript) -> None:
    argv = run_script(LAUNCH, "8008", "org/model", "xpu", "2", PIPELINE_PARALLEL_SIZE="2").ok().argv()
    assert "--device=/dev/dri" in argv
    assert flag(argv, "--group-add") == "video"
    server = argv[argv.index("opea/vllm:xpu") + 1 :]
    assert flag(server, "--device") == "xpu"
    assert flag(server, "--tensor-parallel-size") == "2"
    assert flag(server, "--pipeline-parallel-size") == "2"
    assert flag(server, "--load-in-low-bit") == "sym_int4"
    assert flag(server, "--distributed-executor-backend") == "ray"


@pytest.mark.parametrize("hw_mode", ["cpu", "hpu", "xpu"])
def test_hf_token_only_when_set_and_never_printed(run_script: RunScript, hw_mode: str) -> None:
    unset = run_script(LAUNCH, "8008", "m", hw_mode).ok()
    assert "HF_TOKEN" not in unset.stdout
    assert "HUGGING_FACE_HUB_TOKEN" not in unset.stdout
    for var in ("HUGGINGFACEHUB_API_TOKEN", "HF_TOKEN"):
        result = run_script(LAUNCH, "8008", "m", hw_mode, **{var: "hf_secret123"}).ok()
        pairs = env_pairs(result.argv())
        assert "HF_TOKEN" in pairs
        assert pairs["HF_TOKEN"] is None  # by name: the value stays out of the command line
        assert "hf_secret123" not in result.stdout + result.stderr


def test_proxies_are_passed_by_name(run_script: RunScript) -> None:
    argv = run_script(LAUNCH, https_proxy="http://proxy:3128").ok().argv()
    assert env_pairs(argv)["https_proxy"] is None


def test_local_model_folder_is_mounted(run_script: RunScript, tmp_path: Path) -> None:
    model = tmp_path / "my-model"
    model.mkdir()
    argv = run_script(LAUNCH, "8008", str(model)).ok().argv()
    assert f"{model}:/models/my-model:ro" in argv
    assert flag(argv, "--model") == "/models/my-model"
    assert flag(argv, "--served-model-name") == "my-model"


def test_native_cpu_runs_vllm_from_its_virtualenv(run_script: RunScript, tmp_path: Path) -> None:
    model = tmp_path / "SmolLM2-135M-Instruct-hf"
    model.mkdir()
    argv = (
        run_script(
            LAUNCH,
            *("8123", str(model), "cpu", "1", "16", "8"),
            RUNTIME="native",
            VLLM_VENV="/opt/vv",
            GENMESH_CPUINFO=fake_cpuinfo(tmp_path, ZEN4),
        )
        .ok()
        .argv()
    )
    assert argv[0] == "env"
    assert "VLLM_CPU_KVCACHE_SPACE=4" in argv
    assert argv[argv.index("VLLM_CPU_KVCACHE_SPACE=4") + 1 :][:3] == [
        "/opt/vv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
    ]
    assert "docker" not in argv
    assert flag(argv, "--port") == "8123"
    assert flag(argv, "--host") == "127.0.0.1"
    assert flag(argv, "--model") == str(model)
    assert flag(argv, "--served-model-name") == "SmolLM2-135M-Instruct-hf"
    assert flag(argv, "--dtype") == "bfloat16"
    assert flag(argv, "--block-size") == "16"
    assert flag(argv, "--max-num-seqs") == "8"
    assert "--enforce-eager" not in argv


@pytest.mark.parametrize("runtime", ["docker", "native"])
@pytest.mark.parametrize(
    ("flags", "dtype", "reason"),
    [
        (SAPPHIRE_RAPIDS, "bfloat16", "avx512_bf16"),
        (ZEN4, "bfloat16", "avx512_bf16"),
        (AMX_ONLY, "bfloat16", "amx_bf16"),
        (AVX2_ONLY, "float32", "no avx512_bf16 or amx_bf16"),
        ("", "float32", "no avx512_bf16 or amx_bf16"),
    ],
    ids=["sapphire-rapids", "zen4", "amx-only", "avx2-only", "no-flags"],
)
def test_cpu_dtype_is_bf16_only_where_the_cpu_multiplies_bf16(
    run_script: RunScript, tmp_path: Path, runtime: str, flags: str, dtype: str, reason: str
) -> None:
    cpuinfo = fake_cpuinfo(tmp_path, flags)
    result = run_script(LAUNCH, "8008", str(tmp_path), "cpu", RUNTIME=runtime, GENMESH_CPUINFO=cpuinfo).ok()
    assert flag(result.argv(), "--dtype") == dtype
    notes = [line for line in result.stderr.splitlines() if "--dtype" in line]
    assert len(notes) == 1, result.stderr
    assert notes[0].startswith(f"note: --dtype {dtype}:")
    assert reason in notes[0]
    assert cpuinfo in notes[0]
    assert "VLLM_DTYPE" in notes[0]


def test_cpu_dtype_without_a_readable_cpuinfo_is_float32(run_script: RunScript, tmp_path: Path) -> None:
    result = run_script(LAUNCH, GENMESH_CPUINFO=str(tmp_path / "no-such-cpuinfo")).ok()
    assert flag(result.argv(), "--dtype") == "float32"
    assert "note: --dtype float32" in result.stderr


@pytest.mark.parametrize("runtime", ["docker", "native"])
@pytest.mark.parametrize(
    ("flags", "dtype"), [(AVX2_ONLY, "bfloat16"), (SAPPHIRE_RAPIDS, "float32"), (SAPPHIRE_RAPIDS, "float16")]
)
def test_vllm_dtype_always_wins_on_cpu(
    run_script: RunScript, tmp_path: Path, runtime: str, flags: str, dtype: str
) -> None:
    cpuinfo = fake_cpuinfo(tmp_path, flags)
    result = run_script(
        LAUNCH, "8008", str(tmp_path), "cpu", RUNTIME=runtime, GENMESH_CPUINFO=cpuinfo, VLLM_DTYPE=dtype
    ).ok()
    assert flag(result.argv(), "--dtype") == dtype
    assert "--dtype" not in result.stderr  # nothing was picked, so nothing to explain


def test_accelerators_ignore_the_cpu_flags(run_script: RunScript, tmp_path: Path) -> None:
    cpuinfo = fake_cpuinfo(tmp_path, AVX2_ONLY)
    hpu = run_script(LAUNCH, "8008", "org/m", "hpu", GENMESH_CPUINFO=cpuinfo).ok()
    assert "--dtype" not in hpu.argv()  # vLLM's own default on Gaudi
    assert "--dtype" not in hpu.stderr
    xpu = run_script(LAUNCH, "8008", "org/m", "xpu", GENMESH_CPUINFO=cpuinfo).ok()
    assert flag(xpu.argv(), "--dtype") == "float16"
    assert "--dtype" not in xpu.stderr
    assert flag(run_script(LAUNCH, "8008", "org/m", "hpu", VLLM_DTYPE="bfloat16").ok().argv(), "--dtype") == "bfloat16"


def test_native_extra_args_and_served_name(run_script: RunScript, tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    argv = (
        run_script(
            LAUNCH,
            "8008",
            str(model),
            RUNTIME="native",
            SERVED_MODEL_NAME="SmolLM2-135M-Instruct",
            VLLM_EXTRA_ARGS="--max-model-len 2048",
        )
        .ok()
        .argv()
    )
    assert flag(argv, "--served-model-name") == "SmolLM2-135M-Instruct"
    assert flag(argv, "--max-model-len") == "2048"


def test_native_without_the_virtualenv_says_how_to_get_it(run_script: RunScript, tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    result = run_script(LAUNCH, "8008", str(model), dry_run=False, RUNTIME="native", VLLM_VENV=str(tmp_path / "none"))
    result.fails("make vllm-cpu")


@pytest.mark.parametrize("hw_mode", ["hpu", "xpu"])
def test_native_refuses_accelerators(run_script: RunScript, hw_mode: str) -> None:
    run_script(LAUNCH, "8008", "org/m", hw_mode, RUNTIME="native").fails("RUNTIME=docker", hw_mode)


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["abc"], {}, ["port 'abc'"]),
        (["70000"], {}, ["port '70000'"]),
        (["0"], {}, ["port '0'"]),
        (["8008", "m", "tpu"], {}, ["hw_mode 'tpu'"]),
        (["8008", "m", "openvino"], {}, ["launch_vllm_service_openvino.sh"]),
        (["8008", "m", "hpu", "0"], {}, ["parallel_number '0'"]),
        (["8008", "m", "hpu", "8", "big"], {}, ["block_size 'big'"]),
        (["8008", "m", "hpu", "8", "128", "-1"], {}, ["max_num_seqs '-1'"]),
        (["8008", "m", "hpu", "8", "128", "256", "2k"], {}, ["max_seq_len_to_capture '2k'"]),
        (["8008", "m", "hpu", "8", "128", "256", "2048", "extra"], {}, ["at most 7 parameters"]),
        ([], {"RUNTIME": "podman"}, ["RUNTIME"]),
        ([], {"DOCKER_NETWORK": "bridge2"}, ["DOCKER_NETWORK"]),
        ([], {"VLLM_CONTAINER_NAME": "bad name"}, ["container name"]),
        (["8008", "./missing-folder"], {}, ["does not exist"]),
    ],
)
def test_bad_arguments_fail_with_a_message(
    run_script: RunScript, args: list[str], env: dict[str, str], words: list[str]
) -> None:
    run_script(LAUNCH, *args, **env).fails(*words)
