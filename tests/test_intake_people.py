"""Sizes, lengths and model names as people write them (issue 15): each row
is one phrasing the intake must read, with the value it must give."""
from __future__ import annotations

import pytest

from assistant.intake import parse

MiB, GiB = 1 << 20, 1 << 30


# a bug inside the parser surfaces instead of being read as "unknown"
pytestmark = pytest.mark.usefixtures("raise_errors")


@pytest.mark.parametrize("text,budget", [
    ("还剩 350M 左右能用", 350 * MiB),
    ("I only have 8 gigs of vram", 8 * GiB),
    ("笔记本只有 2 个 G 的显存", 2 * GiB),
    ("显存还有 500 兆左右", 500 * MiB),
    ("还剩 5G 显存", 5 * GiB),
    ("an 8-gig card", 8 * GiB),
    ("给 ollama 留了 10G", 10 * GiB),
    ("a 6 GB budget on a 4060 Ti", 6 * GiB),
    ("at most 6GB for the model", 6 * GiB),
    ("最多用 6G", 6 * GiB),
    ("A100 80G 只分给我 20G", 20 * GiB),
    ("about twelve gigs of VRAM free", 12 * GiB),
    ("Card is an RTX 4000 Ada 20GB", 20 * GiB),
    # what is left once others take theirs, "more than N" read as N, a laptop part, Apple's unified memory,
    # the card's size said against the host's RAM
    ("别的进程占了 2G，实际能用的大概 6G", 6 * GiB),
    ("开着浏览器还剩 4 个多 G", 4 * GiB),
    ("卡是 4060 笔记本版 8G", 8 * GiB),
    ("Mac mini M4 24G 内存的那款", 24 * GiB),
    ("it's a 3090, so I figured 24 gigs plus system RAM would do", 24 * GiB),
])
def test_a_size_as_people_write_it_is_the_budget(text, budget):
    got = parse(text)
    assert (got.budget, got.budget_share) == (budget, None)


@pytest.mark.parametrize("text,share", [
    ("只能用 80% 的显存", 0.8),
    ("We may use 60% of the GPU", 0.6),
    # a share the user may use is of the card they name, so it outranks the card's size
    ("the box has an L40S 48GB but I only get to use half the GPU", 0.5),
    ("4090 24G，显存只能用一半", 0.5),
    ("服务器是 A100，只分给我一半显存", 0.5),
    ("我只能用 half the card", 0.5),
])
def test_a_share_of_the_device_is_kept_as_a_share(text, share):
    got = parse(text)
    assert got.budget is None and got.budget_share == pytest.approx(share)


@pytest.mark.parametrize("text,tokens", [
    ("一份三万字的报告一贴就爆", 30000),
    ("输入大概两万字", 20000),
    ("Pasted a 50,000 character log", 12500),
    ("A 20k-word transcript", 26667),  # 20000 words x 4/3, to the nearest token
])
def test_a_length_of_text_becomes_an_estimated_context(text, tokens):
    got = parse(text)
    assert (got.want_ctx, got.ctx_estimated) == (tokens, True)


def test_a_context_in_tokens_is_not_an_estimate():
    got = parse("num_ctx 32k 就崩")
    assert (got.want_ctx, got.ctx_estimated) == (32768, False)


@pytest.mark.parametrize("text,tokens", [
    ("一个长 prompt（大概一万五 token）就爆了", 15000),
    ("拼起来大概六千多 token", 6000),
    ("输入 2万 token 就崩", 20000),
])
def test_a_token_count_in_chinese_place_words_is_the_context(text, tokens):
    got = parse(text)
    assert (got.want_ctx, got.ctx_estimated) == (tokens, False)


@pytest.mark.parametrize("text,model", [
    ("it freezes at random on llama3.2. the spinner never stops", "llama3.2"),
    # the size still to choose: no model yet
    ("想跑 qwen3，8b 还是 14b 比较合适？", None),
    ("thinking of gemma3 - 12b or 27b?", None),
])
def test_a_family_named_bare_is_the_model_once_its_size_is_chosen(text, model):
    assert parse(text).model == model


@pytest.mark.parametrize("text,n", [
    ("5 个同事共用一台服务器，大家一起问就卡", 5),
    ("about a dozen staff hit it when they log in at once", 12),
    ("our workflow runs 4 branches in parallel", 4),
    ("Discord bot 和网页两边同时说话就卡住", 2),
    ("(so 3 person) use it in same time", 3),
    # "one of us" is who got the error; an embedding job beside the chat is a second model, not a request
    ("gemma3 gives an error for one of us", None),
    ("一边跑 embedding 一边聊天，两个同时上就爆显存", None),
])
def test_a_count_of_people_or_jobs_at_once_is_the_concurrency(text, n):
    assert parse(text).want_parallel == n


@pytest.mark.parametrize("text,gpu", [
    ("M2 的 Mac mini 跑得很慢", "M2"),
    ("卡是 L20，跑 70b 就 500", "L20"),
    ("7800 XT 16G", "RX 7800 XT"),
])
def test_a_gpu_as_people_write_it(text, gpu):
    assert parse(text).gpu == gpu


@pytest.mark.parametrize("text,model", [
    ("qwen-finetune-v2 一长就崩", "qwen-finetune-v2"),
    ("nomic-embed-text 跑着跑着显存就满了", "nomic-embed-text"),
    ("我的模型是自己导入的 my-law-assistant，合同一长就挂了", "my-law-assistant"),
    ("llama-server 跑 qwen2.5-7b-instruct-q4_k_m.gguf 一上来就 OOM", "qwen2.5-7b-instruct-q4_k_m"),
    ("llama3.1-8b crashes at 16k", "llama3.1:8b"),
    ("my custom model mybot:v3 crashes", "mybot:v3"),
])
def test_a_name_the_user_typed_is_the_model(text, model):
    assert parse(text).model == model


@pytest.mark.parametrize("text", [
    "it runs out-of-memory in multi-turn chats",
    "VRAM doesn't go back down after the model unloads",
    "nvidia-smi still shows 6G used",
])
def test_english_compounds_and_tools_are_not_model_names(text):
    assert parse(text).model is None


def test_a_server_tag_found_in_the_message_is_the_model_as_the_server_spells_it():
    tags = ["nomic-embed-text:latest", "mybot:latest", "qwen2.5:7b"]
    assert parse("nomic-embed-text fills the VRAM over time", tags=tags).model == "nomic-embed-text:latest"
    assert parse("mybot 一长就崩", tags=tags).model == "mybot:latest"
    assert parse("mybot 一长就崩").model is None  # a plain word is a name only when the server has it


@pytest.mark.parametrize("text,when,what,phase", [
    ("刚 ollama run 就闪退", "load", "crash", "load"),
    ("with a 40k-token prompt it dies", "long_input", "crash", "long_input"),
    ("跑批处理 10 条一起发就崩", "concurrent", "crash", "concurrent"),
    ("qwen-finetune-v2 一长就崩", "long_input", "crash", "long_input"),
    ("nomic-embed-text 跑着跑着显存就满了", "over_time", "oom", "creeping"),
    ("it is very slow, 2 tokens/s", "unknown", "slow", "slow"),
    ("the answer stops mid-sentence", "unknown", "cut", "long_input"),
    ("it just hangs", "unknown", "hang", "crash"),
])
def test_when_and_what_are_two_axes_and_the_phase_follows_when_first(text, when, what, phase):
    got = parse(text)
    assert (got.when, got.what, got.phase) == (when, what, phase)


@pytest.mark.parametrize("text,when,what", [
    # a word that names a symptom says nothing when it is denied or means something else
    ("no error anywhere, it is just slow", "unknown", "slow"),
    ("it doesn't crash, it stops answering", "unknown", "hang"),
    ("qwen3:32b 在 3060 上跑不动了", "unknown", "slow"),
    ("每次换模型都有 2 GiB stuck in VRAM and then nothing fits", "unknown", "oom"),
    ("只能重启 ollama，之后一直转圈", "unknown", "hang"),
    ("我从早上到下午一直在测，一加载就崩", "load", "crash"),
    ("we both use it, never at the same time, and long prompts crash", "long_input", "crash"),
])
def test_a_denied_or_borrowed_cue_word_does_not_count(text, when, what, cues_only):
    # the cues alone: the learned readers may still read a message no cue
    # does, and are tested in test_intake_learned.py
    got = parse(text)
    assert (got.when, got.what) == (when, what)


@pytest.mark.parametrize("text,parallel", [
    ("二十多个人同时问就挂", 20),
    ("工作流里 6 个分支并发调用", 6),
    ("two dozen workers hit it", 24),
    ("three of us share one box", 3),
    ("8 threads at once and it times out", 8),
    ("32 concurrency in the load test", 32),
    ("a second request while the first is still generating", 2),
    ("llama.cpp with 8 threads is slow", None),  # CPU threads are not requests
    ("三个模型同时加载就爆显存", None),  # models loaded together are not requests
])
def test_a_count_of_people_or_requests_as_people_write_it_is_the_concurrency(text, parallel):
    assert parse(text).want_parallel == parallel


@pytest.mark.parametrize("text,gpu", [
    ("RTX 4000 Ada", "RTX 4000 Ada"),
    ("Radeon 890M iGPU", "Radeon 890M"),
    ("MacBook Pro M3 Max", "M3 Max"),
    ("Mac Studio M2 Ultra", "M2 Ultra"),
])
def test_a_gpu_name_is_read_whole(text, gpu):
    assert parse(text).gpu == gpu


@pytest.mark.parametrize("text,error", [
    ("then ggml_cuda_compute_forward: MUL_MAT failed and it dies",
     "ggml_cuda_compute_forward: MUL_MAT failed"),
    ('runner dies with POST predict: Post "http://127.0.0.1:40001/completion": EOF. odd',
     'POST predict: Post "http://127.0.0.1:40001/completion": EOF'),
])
def test_a_pasted_log_line_without_quotes_is_the_error(text, error):
    assert parse(text).error == error


@pytest.mark.parametrize("text,error", [
    # an HTTP status says only that a request failed: a specific text elsewhere is the error
    ("the UI shows a 500 Internal Server Error and the log says CUDA error: out of memory", "CUDA error: out of memory"),
    ("页面弹出 500 Internal Server Error，日志里是 cudaMalloc failed: out of memory", "cudaMalloc failed: out of memory"),
    # unless it is all there is, or Ollama's own text follows it
    ("got a 500 Internal Server Error when I pasted the doc", "500 Internal Server Error"),
    ("Error: 500 Internal Server Error: llama runner process has terminated: exit status 2",
     "500 Internal Server Error: llama runner process has terminated: exit status 2"),
])
def test_a_bare_http_status_yields_to_a_specific_error(text, error):
    assert parse(text).error == error


@pytest.mark.parametrize("text,keep", [
    ("上下文半点都不能少", True),
    ("不想缩短上下文", True),
    ("上下文减到 4k 也可以", False),
])
def test_whether_the_context_may_shrink(text, keep):
    assert parse(text).keep_context is keep


@pytest.mark.parametrize("text,model", [
    # the tag a Modelfile or fine-tune is built FROM is the base, not the model in trouble
    ("Modelfile 里 FROM qwen2.5:14b，ollama run law-bot 一启动就爆显存", "law-bot"),
    ("custom model 'chat-pal', built on llama3.1:8b, hangs with 5 users", "chat-pal"),
    ("FROM qwen2.5:7b and nothing else, it OOMs on load", "qwen2.5:7b"),  # only the base is named
    # the model switched to is the one that fails
    ("用 llama3.1:8b 好好的，一换成 qwen2.5:32b 就崩", "qwen2.5:32b"),
    ("switched from phi4:14b to gemma3:27b and it dies", "gemma3:27b"),
    ("用 qwen2.5:14b 爆显存，换成 qwen2.5:7b 就好了", "qwen2.5:14b"),  # the way out is not the trouble
    # a GGUF file keeps the case it has on disk; a library name does not
    ("Imported My-Model-7B-Q4_K_M.gguf and it crashes", "My-Model-7B-Q4_K_M"),
    ("NeoHorse-1 一长就崩", "neohorse-1"),
])
def test_the_model_is_the_one_in_trouble_not_its_base(text, model):
    assert parse(text).model == model


@pytest.mark.parametrize("text,gpu", [
    ("The box has two A6000s.", "A6000"),
    ("卡是 4090D 24G", "4090D"),
    ("RTX 5090D", "RTX 5090D"),
    ("A770 16G", "A770"),
    ("Intel Arc A770 16GB", "Arc A770"),
    ("显卡是 20G 的 A4500", "A4500"),
    ("the 4090 drivers are new", "4090"),
])
def test_a_gpu_written_short_or_plural_is_read(text, gpu):
    assert parse(text).gpu == gpu


@pytest.mark.parametrize("text,budget", [
    ("my 3060 has 12GB", 12 * GiB),
    ("nvidia-smi shows 7400MiB free", 7400 * MiB),
    ("ollama is allowed 30GB of the 80GB", 30 * GiB),
    ("ollama should only use 18GB of my 24GB card", 18 * GiB),
    ("our MIG slice is 20GB", 20 * GiB),
    ("这台机器只给 ollama 分了 6GiB", 6 * GiB),
    ("卡是 2080 Ti，十一个G", 11 * GiB),
    ("The card reports 23.6 GiB total", int(23.6 * GiB)),
    ("macOS lets the GPU wire about 27GB of the unified memory", 27 * GiB),
    # sizes that are not what the card has
    ("nvidia-smi shows 7G used", None),
    ("my 3060 is using 11GB and then crashes", None),
    ("the model file is only 4.7GB", None),
    ("I only use 8GB models on my 3060", None),
    ("the gpu uses 10GB total", None),
])
def test_a_budget_handed_to_ollama_or_read_off_a_tool(text, budget):
    got = parse(text)
    assert (got.budget, got.budget_share) == (budget, None)


@pytest.mark.parametrize("text,budget", [
    # the card's size less what something else holds is what is free
    ("3090 一共 24 个 G，已经被别的进程吃掉 18 个", 6 * GiB),
    ("4080 16G，不过 Blender 那边也开着，占了差不多 5G", 11 * GiB),
    ("6 of my 8 GB are already taken by the desktop", 2 * GiB),
    ("a 12GB card with about 3GB used by Chrome", 9 * GiB),
    ("nvidia-smi shows 512MiB / 8192MiB before loading anything", 7680 * MiB),
    # a total: across cards, or as a tool reports it after the model grew into it
    ("两块 3090 24G，总共 48G", 48 * GiB),
    ("two 4060 Ti 16G×2 in one box", 32 * GiB),
    ("after a day nvidia-smi shows 11900MiB / 12288MiB and then OOM", 12288 * MiB),
    ("the laptop's 3050 is empty, 4096MiB total", 4096 * MiB),
    # a unit said once, a number with 点几, a size in thousands of 兆
    ("16 gigs total, nvidia-smi says ~13.5 free", int(13.5 * GiB)),
    ("显存只剩 5 点几 G", 5 * GiB),
    ("还剩两千兆左右", 2000 * MiB),
    # the card's size said as a belief, or as not enough
    ("I assumed 12GB would be enough for a 14b", 12 * GiB),
    ("按理说 16G 跑 14b 没问题吧", 16 * GiB),
    ("are 8 gigs really not enough for this?", 8 * GiB),
    # what the model itself holds is not taken from the budget; "一些" is not a number
    ("4060 Ti 16G，GPU 只吃了八个G左右", 16 * GiB),
    ("卡是 3060 12G，桌面占了一些", 12 * GiB),
])
def test_a_budget_said_as_a_sum_is_read(text, budget):
    got = parse(text)
    assert (got.budget, got.budget_share) == (budget, None)


@pytest.mark.parametrize("text", ["With parallel at 1 it was 100% GPU", "on my 3090 it runs 70% GPU, 30% CPU"])
def test_where_a_model_ran_is_not_a_share(text):
    assert parse(text).budget_share is None


@pytest.mark.parametrize("text,share", [
    ("我们组规定 ollama 最多只能占整张 A100 的 40%", 0.4),
    # where `ollama ps` says a model runs is a reading, not a share to keep to
    ("`ollama ps` showed phi4 at 11 GB, 100% GPU", None),
    ("nvidia-smi shows 95% GPU util", None),
])
def test_a_share_is_a_rule_not_a_reading(text, share):
    got = parse(text)
    assert got.budget is None and got.budget_share == (pytest.approx(share) if share else None)


@pytest.mark.parametrize("text,parallel", [
    ("OLLAMA_NUM_PARALLEL 设成 2 之后就 OOM", 2),
    ("两个请求一起进来就 OOM", 2),
    ("两个 API client（n8n 和 Continue）同时打一个模型", 2),
    ("when like 10 ppl spam it at once", 10),
    ("两个 model 同时加载就爆", None),  # models are not requests
])
def test_a_count_after_a_setting_or_with_an_aside_is_the_concurrency(text, parallel):
    assert parse(text).want_parallel == parallel


def test_a_chinese_length_with_two_places_is_estimated_whole():
    got = parse("一份一万五千字的会议纪要")
    assert (got.want_ctx, got.ctx_estimated) == (15000, True)


@pytest.mark.parametrize("text,keep", [
    ("上下文设的 64k，不想再往小了调", True),
    ("能不能保持 128k 不降？", True),
    ("I really need the full window", True),
    ("context 短一点没关系，能跑就行", False),
    ("I'd happily take a smaller context if it stayed fast", False),
])
def test_whether_the_context_may_shrink_as_people_say_it(text, keep):
    assert parse(text).keep_context is keep


@pytest.mark.parametrize("text,when,what", [
    # a choice the user will not make is not memory that stays
    ("I really need the full window, can't drop chunks, long prompts OOM", "long_input", "oom"),
    # stuck halfway is a hang; ended halfway is a cut
    ("回答生成到一半就卡住了", "unknown", "hang"),
    ("回答写到一半就断了", "unknown", "cut"),
    # memory that never comes back down is not a request that never comes back
    ("VRAM never comes back down", "over_time", "oom"),
    ("the third request never comes back", "unknown", "hang"),
    # switching the runtime is not loading a new model; switching the model is
    ("LM Studio 没事，换 ollama 跑就直接躺了", "unknown", "crash"),
    ("一 switch 到 27b 就直接炸了", "load", "crash"),
    ("问了一轮就崩了", "unknown", "crash"),  # one round is not a long chat
    ("每一次加载就崩", "load", "crash"),  # every single time is not once every N requests
    ("每 500 个请求 ollama 就得重启", "over_time", "oom"),  # 500 requests, not an HTTP 500
])
def test_a_cue_in_its_borrowed_sense_does_not_count(text, when, what):
    got = parse(text)
    assert (got.when, got.what) == (when, what)


@pytest.mark.parametrize("text,what", [
    # a cause the user only asks about is a guess, not the symptom
    ("回答到一半就截断了。是 num_predict 的问题还是显存不够？", "cut"),
    ("输出到一半就没了，是不是爆显存了？", "cut"),
    ("一加载就爆显存，怎么办？", "oom"),
])
def test_a_cause_asked_about_is_not_the_symptom(text, what):
    assert parse(text).what == what


@pytest.mark.parametrize("text,when", [
    # one at a time it works: the trouble is the concurrency, whatever clock the message also keeps
    ("同时发 8 个请求，跑着跑着就退了，一个一个发就不会", "concurrent"),
    ("部门十个人一起用，人少的时候好好的，一到下午大家都在问就 OOM", "concurrent"),
    ("跑着跑着就退了", "over_time"),
])
def test_work_that_goes_fine_one_at_a_time_is_a_concurrency_problem(text, when):
    assert parse(text).when == when
