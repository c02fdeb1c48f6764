"""A transformers GPT-2 training loop built from a small config (random
weights, nothing downloaded): a DataLoader of random token ids, AdamW.
Nothing in it knows about dftracer.  Writes its step durations (wall and
CPU time of the process, seconds) as JSON to --out.  Run by benchmarks/torch/bench_autotrace.py with and without
dftracer run.
"""

import argparse
import json
import time

import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging

BATCH, SEQ, VOCAB = 8, 64, 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(n_embd=128, n_layer=4, n_head=4, n_positions=SEQ, vocab_size=VOCAB,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = TensorDataset(torch.randint(0, VOCAB, (args.steps * BATCH, SEQ)))
    times = {"wall": [], "cpu": []}
    last, last_cpu = time.perf_counter(), time.process_time()
    for (ids,) in DataLoader(data, batch_size=BATCH):
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        now, now_cpu = time.perf_counter(), time.process_time()
        times["wall"].append(now - last)
        times["cpu"].append(now_cpu - last_cpu)
        last, last_cpu = now, now_cpu
    with open(args.out, "w") as f:
        json.dump(times, f)
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
