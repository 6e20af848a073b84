"""The concurrency a message speaks of: "4 个并发", "3 users at once",
"OLLAMA_NUM_PARALLEL=4"."""
from __future__ import annotations

import re

from assistant.intake.numbers import NUMWORD, count
from assistant.intake.text import ICASE


_PAR_PATTERNS = [
    # "4 个并发", "4并发", "两个人同时用", "4 路并发", "二十多个人同时"; after a measure word any
    # short noun ("八个客服同时", "5 个分支并发", "两个 API client（n8n 和 Continue）同时"), but not
    # models or cards loaded together
    re.compile(r"(?<![A-Za-z0-9_])" + NUMWORD + r"\s*(?:(?:多|几|来)?(?:个|路|位|名)\s*"
               r"(?:(?!(?:models?|gpus?|cards?)\b)[A-Za-z][A-Za-z0-9]*\s*){0,2}"
               r"(?:(?!模型|小时)[\u4e00-\u9fff]){0,4}?|(?:[A-Za-z]+\s*)?(?:人|用户|请求|客户端|会话|同事|应用|窗口|边)?)"
               r"\s*(?:[(（][^)）\n]{0,40}[)）])?\s*(?:同时|并发|一起(?!加载|载入|load)|并行)", ICASE),
    # people sharing one box: "6 个人共用一台 Mac Studio", "三个同事合用一张卡"
    re.compile(r"(?<![A-Za-z0-9_])" + NUMWORD + r"\s*(?:多|几|来)?(?:个|位|名)?\s*(?:人|同事|用户|学生|员工)\s*(?:共用|共享|合用)"),
    # "同时开 3 个会话", "同时 2 个请求", "同时发了 10 个请求"
    # "同时 6 个 session"
    re.compile(r"(?:同时|并发|并行|一次性|一口气)\s*(?:开|发|跑|用|接|处理|打|起)?\s*(?:了)?\s*" + NUMWORD + r"\s*(?:个|路)\s*(?:会话|请求|窗口|用户|人|线程|协程|进程|任务|"
               r"(?:sessions?|requests?|users?|clients?|chats?|connections?|agents?|workers?|threads?|tabs?)\b)", ICASE),
    # "同时在线约 200 人": people online at once
    re.compile(r"同时在线\s*(?:约|大约|大概|将近|差不多|超过)?\s*" + NUMWORD + r"\s*(?:多)?\s*(?:个|位|名)?\s*(?:人|用户)"),
    # "大概 6 路", "开了 8 路": a count of channels said alone (not "8 路并发", read above; "一路" is all along)
    re.compile(r"(?<![\w.])(\d+|[两俩三四五六七八九十]+)\s*路(?![\u4e00-\u9fff])"),
    # "3 users", "two browser tabs", "4 people", "4 at once", "two dozen agent workers", "two of us":
    # in this room a count of users is concurrency
    re.compile(r"\b" + NUMWORD + r"\s+(?:concurrent\s+|parallel\s+|simultaneous\s+)?(?:[a-z]+\s+){0,2}(?:users|people|ppl|folks|"
               r"persons?|staff|colleagues|coworkers|co-workers|employees|students|"
               r"clients|agents|workers|browser tabs|tabs|sessions|chats)\b|\b(?!one\s)" + NUMWORD + r"\s+(?:at once|of us)\b", ICASE),
    # "并发 4", "并发数设为4", "并行请求数: 2"
    re.compile(r"(?:并发|并行)(?:请求)?(?:数|量|数量)?\s*(?:设为|设成|设置为|设置成|开到|调到|改成|是|为|=|:|到|开)?\s*"
               + NUMWORD + r"(?!\s*(?:g|gb|k|%))(?![多下旦直点些起上])", ICASE),
    # "4 concurrent users", "two simultaneous requests", "16 concurrency"
    re.compile(r"\b" + NUMWORD + r"\s+(?:concurrent|simultaneous|parallel|concurrency)\b", ICASE),
    # "4 users at once", "3 requests at the same time", "12 threads at once" (threads alone are CPU threads)
    re.compile(r"\b" + NUMWORD + r"\s+(?:users?|requests?|clients?|sessions?|people|ppl|folks|connections?|calls|threads|"
               r"workers|agents|processes|branches|jobs|tasks|scripts)\s+"
               r"(?:\w+\s+){0,5}?(?:at once|at the same time|simultaneously|concurrently|in parallel|"
               r"within (?:a|one|\d+) (?:second|millisecond|ms)s? of each other|at the same (?:moment|instant)|in flight|"
               r"(?:come|comes|came|coming|arrive|arrives|arrived|land|lands|landed)\s+in\s+together)", ICASE),
    # "10+ people", "20+ users at once": a count with a plus is still the count
    re.compile(r"\b(\d+)\+\s*(?:[a-z]+\s+)?(?:users|people|ppl|folks|clients|agents|workers|requests|sessions|calls)\b", ICASE),
    # "16 threads -> it dies. 1 thread ok": threads set against a single one are the ones sending
    re.compile(r"\b(\d+)\s+(?:threads|workers|processes)\b(?=[^\n]{0,80}?\b(?:1|one|a single|single)\s+(?:thread|worker|process)\s+(?:is\s+|works\s+|runs\s+)?(?:ok|okay|fine|works)\b)", ICASE),
    # "8 in-flight requests", "4 outstanding calls"
    re.compile(r"\b" + NUMWORD + r"\s+(?:in-flight|inflight|outstanding|simultaneous)\s+(?:requests|calls|jobs|generations)\b", ICASE),
    # people of a household or a team who use it: "my two kids both use it", "three roommates share it"
    re.compile(r"\b" + NUMWORD + r"\s+(?:[a-z]+\s+)?(?:kids|children|sons|daughters|roommates|flatmates|housemates|teammates|"
               r"friends|devs|developers|engineers|analysts|testers|family members)\s+(?:\w+\s+){0,2}?"
               r"(?:both|all|use|using|share|sharing|hit|hitting|query|chat|are on)\b", ICASE),
    # "our team of 6", "a 5-person team"
    re.compile(r"\b(?:team|group|office|lab|class)\s+of\s+" + NUMWORD + r"\b(?!\s*(?:gpus?|cards?|servers?|nodes|models?|machines|boxes))"
               r"|\b" + NUMWORD + r"[- ](?:person|people|man|dev|developer)\s+(?:team|group|office|lab|company|shop|startup)\b", ICASE),
    # several programs on one server: "two apps share one ollama", "3 services hit the same instance"
    re.compile(r"\b" + NUMWORD + r"\s+(?:[a-z]+\s+)?(?:apps|applications|clients|services|frontends|programs|tools|bots|scripts)\s+"
               r"(?:share|sharing|use|hit|call|talk to)\s+(?:one|the same|a single|my|our)\s+(?:\w+\s+)?"
               r"(?:ollama|server|instance|box|machine|gpu|card|endpoint|backend)\b", ICASE),
    # "~25 analysts run their reports at the same time": any plural noun, not models or cards loaded together
    re.compile(r"\b" + NUMWORD + r"\s+(?!(?:models|gpus|cards|boxes|servers|nodes|layers|tensors|threads|cores|tokens|bytes|files|pages|chunks)\b)[a-z]+s\s+(?:\w+\s+){0,4}?"
               r"(?:at once|at the same time|simultaneously|concurrently|in parallel)", ICASE),
    # "concurrency of 4", "OLLAMA_NUM_PARALLEL=4", "parallel 2", "--parallel 2"
    re.compile(r"(?:concurrency|parallelism|ollama_num_parallel|num_parallel|--parallel|(?<![\w-])parallel)"
               r"\s*(?:level\s*)?(?:of|=|:|to|is|at|set to|设成|设为|设置为|设置成|设到|改成|改为|调到|开到|是|为)?\s*(\d+)\b"
               r"(?!\s*(?:g|gb|k|%))", ICASE),
    re.compile(r"(?:concurrency|ollama_num_parallel|num_parallel|--parallel|(?<![\w-])parallel|并发数?)\s*(?:from|从)\s*\d+\s*(?:to|改成|改为|改到|调到|调成|加到|提到|升到|到|->|→)\s*(\d+)\b(?!\s*(?:g|gb|k|%))", ICASE),
    re.compile(r"\b(a couple of|a pair of)\s+(?:concurrent|simultaneous|parallel)\b", ICASE),
    # "a second request while the first is still streaming": the second one makes two
    re.compile(r"\b(?:a|the)\s+(second|third|fourth)\s+(?:request|prompt|call|chat|user|client)"
               r"(?=[^.\n]{0,40}\bwhile\b)", ICASE),
    # the one too many, after a count that copes: "fine with three; a fourth makes it crawl", "add a third
    # caller", "第四个人一进来就卡" (read only beside a count of people or requests: "a third of the card" is a share)
    # (a third *request* is one after another: "the third request never comes back")
    re.compile(r"(?:\badd(?:ing)?\s+(?:in\s+)?(?:a|the|one more,?\s+a)\s+(second|third|fourth|fifth|sixth|seventh|eighth)\b(?!\s+of\b)"
               r"|\b(?:a|the)\s+(third|fourth|fifth|sixth|seventh|eighth)\b(?!\s+of\b)"
               r"(?=\s+(?:\w+\s+){0,3}?(?:users?|callers?|clients?|person|people|one|colleagues?|coworkers?|agents?|tabs?)\b"
               r"|\s+(?:makes|breaks|joins|kills|crashes|tips)\b))", ICASE),
    re.compile(r"第\s*([二三四五六七八九十]+|\d+)\s*(?:个|位|路)\s*(?:人|用户|请求|会话|同事|客户端|窗口)"),
    # a parallel setting changed later in the sentence: "NUM_PARALLEL 2 没事，调到 6 就炸", "parallel 2 was fine, bumped it to 8"
    re.compile(r"(?:num_parallel|parallel|并发数?)[^。\n.]{0,24}?(?:调到|调成|改成|改到|改为|设成|设到|开到|加到|提到|升到|换成|"
               r"bumped\s+(?:it\s+)?to|raised\s+(?:it\s+)?to|set\s+(?:it\s+)?to|went\s+to|moved\s+(?:it\s+)?to)\s*(\d+)\b"
               r"(?!\s*(?:g|gb|k|%))", ICASE),
    # after a parallel setting that copes, the one that fails said as a bare number: "NUM_PARALLEL=4 is fine, 8 OOMs"
    re.compile(r"(?:num_parallel|parallel)\s*[=:]?\s*\d+\b[^.\n]{0,40}?(?:[,;，；]|\band\b|\bbut\b)\s*(?:but\s+|and\s+)?(\d+)\s+"
               r"(?:OOMs?|crashes|fails|breaks|dies|hangs|stalls|doesn't|does not|won't|is not|isn't)\b", ICASE),
]
_ORDINALS = {"second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8}
# "两个同时上", "两边一起": a count with no noun, in a message with an embedding or rerank job beside the chat,
# counts the two models at work, not requests to one
_BARE_PAIR = re.compile(r"(?:2|两|俩)\s*(?:个|边)?\s*(?:同时|一起|并发|并行)")
_SECOND_MODEL = re.compile(r"embedding|embed\b|rerank|向量化|嵌入模型|一边[^。\n]{0,40}一边", ICASE)


def find_parallel(text: str) -> int | None:
    """The count of requests at once the message needs: the largest named (a
    count that works is said beside the one that fails, and is smaller)."""
    seen = parallel_counts(text)
    return max(seen) if seen else None


def parallel_counts(text: str) -> list[int]:
    """Every count of requests at once the message names."""
    seen = []
    for rx in _PAR_PATTERNS:
        for m in rx.finditer(text):
            if _BARE_PAIR.fullmatch(m.group(0).strip()) and _SECOND_MODEL.search(text):
                continue
            i = next(i for i, g in enumerate(m.groups(), 1) if g)
            word = m.group(i)
            if "几" in (text[m.start(i) - 1:m.start(i)], text[m.end(i):m.end(i) + 1]):
                continue  # "十几个人", "几十个同事": a rough size, not a count
            n = _ORDINALS.get(word.lower()) or count(word)
            if n and 1 <= n <= 1024:
                seen.append(n)
    return seen
