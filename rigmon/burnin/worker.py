"""One burn-in worker: trains on one device and reports JSON lines on stdout.

Run by ``rigmon burnin`` as ``python -m rigmon.burnin.worker``, one process per GPU, so a
failing GPU cannot take the others down. Events: ``start``, ``progress`` (every few
seconds), ``probe`` (determinism checks), ``end``, or ``error``.

The determinism probe runs a fixed batch through a frozen copy of the initial weights and
compares the logits with the first result: on sound hardware they match (within bf16
noise); silent data corruption makes them drift.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
import traceback

PROGRESS_EVERY = 2.0
PROBE_EVERY = 20.0


def emit(**event) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="rigmon.burnin.worker")
    p.add_argument("--device", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--model", default="auto")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--ddp", action="store_true")
    p.add_argument("--no-compile", action="store_true")
    args = p.parse_args(argv)
    try:
        return train(args)
    except Exception as e:  # reported to the parent, which fails this GPU with the reason
        emit(event="error", message=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-2000:])
        return 1


def train(args) -> int:
    import torch
    import torch.nn.functional as F

    from .data import MarkovChain
    from .model import GPT, choose

    inject = os.environ.get("RIGMON_BURNIN_INJECT", "")  # test hook: "determinism", "nan", "die:RANK", "late:RANK"
    device = torch.device(args.device)
    rank, world = 0, 1
    if args.ddp:
        import torch.distributed as dist

        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        from datetime import timedelta

        # a rank that dies must not leave the others waiting for ever in a collective
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120)
        )
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    config = choose(args.model, device)
    torch.manual_seed(args.seed)
    states = min(config.vocab, 4096)
    chain = MarkovChain.build(states, fanout=4, seed=args.seed).to(device)
    model = GPT(config).to(device)
    frozen = copy.deepcopy(model).eval()
    if args.ddp:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        precision, dtype = "bf16", torch.bfloat16
    elif device.type == "cuda":
        precision, dtype = "fp16", torch.float16
    else:
        precision, dtype = "fp32", None
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
    fused = device.type == "cuda"
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=1e-3,
        betas=(0.9, 0.95),
        weight_decay=0.0,
        fused=fused or None,
        foreach=None if fused else True,
    )
    step_model = model
    compiled = False
    if device.type == "cuda" and not args.no_compile:
        try:
            step_model = torch.compile(model)
            compiled = True
        except Exception:  # older GPUs or toolchains: eager is fine
            step_model = model

    def autocast():
        return (
            torch.autocast(device.type, dtype=dtype)
            if dtype is not None
            else torch.autocast(device.type, enabled=False)
        )

    g = torch.Generator(device=device).manual_seed(args.seed + rank)
    probe_batch = chain.sample(4, config.context + 1, torch.Generator(device=device).manual_seed(99))[:, :-1]
    with torch.no_grad(), autocast():
        reference = frozen(probe_batch).float()
    peak_lr = 3e-3 if config.name == "tiny" else (1e-3 if config.name == "small" else 6e-4)
    warmup = 0.05 * args.seconds
    emit(
        event="start",
        device=str(device),
        rank=rank,
        world=world,
        model=config.name,
        params=config.parameters(),
        precision=precision,
        compiled=compiled,
        floor=chain.entropy_rate,
        flops_per_token=config.flops_per_token(),
        tokens_per_step=config.batch * config.context,
        gpu_name=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        cpu_name=_cpu_name(),
    )

    pool, pool_used = None, 0
    if inject == f"late:{rank}":  # test hook: a rank that starts its clock later than the others
        time.sleep(2.0)
    started = time.monotonic()
    last_report, last_probe = started, started
    tokens = steps = 0
    window_tokens, window_loss, window_steps = 0, 0.0, 0
    recent: list[float] = []
    bad = False
    agreed, agreeing = None, None  # data-parallel: whether any rank's time is up, all-reduced
    while True:
        now = time.monotonic()
        elapsed = now - started
        if args.ddp:
            # every rank stops on the same step (one that stopped alone would leave the others
            # in a gradient all-reduce with a closed peer): each says whether its time is up and
            # all stop once any has, the flag's all-reduce running behind the step it was sent with
            if agreeing is not None:
                agreeing.wait()
                if agreed.item():
                    break
            agreed = torch.tensor([int(elapsed >= args.seconds)], device=device)
            agreeing = dist.all_reduce(agreed, op=dist.ReduceOp.MAX, async_op=True)
        elif elapsed >= args.seconds:
            break
        if pool is None or pool_used >= pool.shape[0]:
            pool, pool_used = chain.sample(config.batch * 16, config.context + 1, g), 0
        batch = pool[pool_used : pool_used + config.batch]
        pool_used += config.batch
        fraction = elapsed / args.seconds
        lr = (
            peak_lr * min(1.0, elapsed / warmup)
            if elapsed < warmup
            else peak_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * fraction)))
        )
        for group in optimizer.param_groups:
            group["lr"] = lr
        with autocast():
            logits = step_model(batch[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, config.vocab), batch[:, 1:].reshape(-1))
        if inject == f"die:{rank}" and args.ddp and elapsed > args.seconds / 3:
            os._exit(3)  # a rank lost mid-run, as a GPU falling off the bus takes its process
        if inject == "nan" and elapsed > args.seconds / 2:
            loss = loss * float("nan")
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        steps += 1
        tokens += config.batch * config.context
        window_tokens += config.batch * config.context
        window_steps += 1
        window_loss += loss.detach()
        if now - last_report >= PROGRESS_EVERY:
            mean = float(window_loss) / window_steps  # one device sync per report, not per step
            if not math.isfinite(mean):
                bad = True
            recent.append(mean)
            emit(
                event="progress",
                t=round(elapsed, 3),
                step=steps,
                tokens=tokens,
                tokens_per_s=window_tokens / (now - last_report),
                loss=mean if math.isfinite(mean) else None,
                lr=lr,
            )
            last_report, window_tokens, window_loss, window_steps = now, 0, 0.0, 0
            if bad:
                break
        if now - last_probe >= PROBE_EVERY:
            emit(event="probe", t=round(elapsed, 3), **probe(frozen, probe_batch, reference, autocast, inject))
            last_probe = now
    if not bad:
        emit(
            event="probe",
            t=round(time.monotonic() - started, 3),
            **probe(frozen, probe_batch, reference, autocast, inject),
        )
    tail = recent[-max(1, len(recent) // 10) :]
    final = sum(tail) / len(tail) if tail and not bad else None
    peak_memory = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    emit(
        event="end",
        steps=steps,
        tokens=tokens,
        seconds=round(time.monotonic() - started, 3),
        final_loss=final,
        floor=chain.entropy_rate,
        nan=bad,
        peak_memory_bytes=peak_memory,
    )
    if args.ddp:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 0


def _cpu_name() -> str | None:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8", errors="replace"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or None


def probe(frozen, batch, reference, autocast, inject: str) -> dict:
    import torch

    with torch.no_grad(), autocast():
        again = frozen(batch).float()
    if inject == "determinism":
        again = again + 0.5 * torch.randn_like(again)  # what a flaky multiplier does
    diff = float((again - reference).abs().max())
    scale = float(reference.abs().max()) or 1.0
    tolerance = 1e-3 if reference.dtype == torch.float32 and not torch.is_autocast_enabled() else 2e-2
    ok = math.isfinite(diff) and diff <= tolerance * max(scale, 1.0)
    return {"max_abs_diff": diff, "scale": scale, "ok": ok}


if __name__ == "__main__":
    raise SystemExit(main())
