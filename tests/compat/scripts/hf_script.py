"""A Hugging Face Trainer script written as Determined 0.38's hf_trainer_api examples write it
(`determined.transformers.DetCallback`), on a tiny GPT-2 built here (no downloads) and random
tokens. Hyperparameters: max_steps, every (log/eval/save period), sleep (seconds per step)."""

import logging
import time

import determined as det
import torch
from determined.transformers import DetCallback
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, 64, (n, 16), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


class Slow(TrainerCallback):
    def __init__(self, seconds):
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


def main():
    info = det.get_cluster_info()
    hp = info.trial.hparams
    every = hp.get("every", 4)
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=64,
        n_positions=16,
        n_embd=16,
        n_layer=1,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir="hf_out",
        max_steps=hp.get("max_steps", 12),
        per_device_train_batch_size=4,
        logging_steps=every,
        eval_strategy="steps",
        eval_steps=every,
        save_strategy="steps",
        save_steps=every,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    with det.core.init() as core_context:
        callback = DetCallback(core_context, args, user_data={"source": "hf_script"})
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=Tokens(64, 0),
            eval_dataset=Tokens(16, 1),
            callbacks=[callback, Slow(hp.get("sleep", 0))],
        )
        print(f"resume_from_checkpoint={args.resume_from_checkpoint}", flush=True)
        trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
        print(f"done at {trainer.state.global_step}", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    main()
