"""Compile every statically feasible config of a CUDA variant for an arch's space, in parallel, before a
tune: CuPy keeps NVRTC's output on disk, so the tune's trials then load instead of compiling one config
at a time (a fresh GPU host compiles each `cuda_ws` config for 10-20 s). Each config runs once on a
small problem in a pool of processes; nothing is timed or checked here.

    python3 scripts/warm_kernel_cache.py cuda_ws sm_120 [--dtype bfloat16] [--jobs 12]
    python3 scripts/warm_kernel_cache.py cuda_qreg sm_90 --configs '{"BLOCK_N": 16}' ...  (over the arch's default)
"""

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def compile_one(args: tuple[str, str, str]) -> str:
    variant, config_json, dtype = args
    import torch

    from verify_kernels import make_problem, verify_attention

    try:
        problem = make_problem(100, 8, 8, dtype=getattr(torch, dtype), device="cuda", seed=0)
        verify_attention(*problem.arguments(), **problem.kwargs(), variant=variant, config=json.loads(config_json))
        torch.cuda.synchronize()
        return f"ok   {config_json}"
    except Exception as error:  # the tune reports it again, as the trial's failure
        return f"fail {config_json}: {type(error).__name__}: {str(error)[:160]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant")
    parser.add_argument("arch")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--configs", nargs="+", metavar="JSON",
                        help="these configs (over the arch's default) instead of the feasible space")
    args = parser.parse_args()
    from harness.static.space import resolve
    from harness.tune.study import feasible_space

    target = resolve(args.variant, args.arch)
    if args.configs:
        configs = [json.dumps({**target.defaults, **json.loads(c)}, sort_keys=True) for c in args.configs]
    else:
        _, feasible, _ = feasible_space(target, progress=False)
        configs = [json.dumps(candidate.config, sort_keys=True) for candidate in feasible.values()]
    print(f"{args.variant} on {args.arch}: compiling {len(configs)} feasible configs, {args.jobs} at a time",
          flush=True)
    import multiprocessing

    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        for line in pool.map(compile_one, [(args.variant, c, args.dtype) for c in configs]):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
