"""Whisper's languages: the code its tokenizer writes as ``<|xx|>`` for each language name it knows
(the table of openai/whisper's ``tokenizer.py``, with its aliases). OPEA's Whisper service and the
``openai-whisper`` CLI take the name (``language=english``); OpenAI's API takes the code."""

from __future__ import annotations

_NAMES = """
en english; zh chinese; de german; es spanish; ru russian; ko korean; fr french; ja japanese;
pt portuguese; tr turkish; pl polish; ca catalan; nl dutch; ar arabic; sv swedish; it italian;
id indonesian; hi hindi; fi finnish; vi vietnamese; he hebrew; uk ukrainian; el greek; ms malay;
cs czech; ro romanian; da danish; hu hungarian; ta tamil; no norwegian; th thai; ur urdu;
hr croatian; bg bulgarian; lt lithuanian; la latin; mi maori; ml malayalam; cy welsh; sk slovak;
te telugu; fa persian; lv latvian; bn bengali; sr serbian; az azerbaijani; sl slovenian; kn kannada;
et estonian; mk macedonian; br breton; eu basque; is icelandic; hy armenian; ne nepali; mn mongolian;
bs bosnian; kk kazakh; sq albanian; sw swahili; gl galician; mr marathi; pa punjabi; si sinhala;
km khmer; sn shona; yo yoruba; so somali; af afrikaans; oc occitan; ka georgian; be belarusian;
tg tajik; sd sindhi; gu gujarati; am amharic; yi yiddish; lo lao; uz uzbek; fo faroese;
ht haitian creole; ps pashto; tk turkmen; nn nynorsk; mt maltese; sa sanskrit; lb luxembourgish;
my myanmar; bo tibetan; tl tagalog; mg malagasy; as assamese; tt tatar; haw hawaiian; ln lingala;
ha hausa; ba bashkir; jw javanese; su sundanese; yue cantonese;
my burmese; ca valencian; nl flemish; ht haitian; lb letzeburgesch; ps pushto; pa panjabi;
ro moldavian; ro moldovan; si sinhalese; es castilian; zh mandarin
"""

# language name (lower case) -> code
LANGUAGE_CODES: dict[str, str] = {
    name: code
    for entry in _NAMES.replace("\n", " ").split(";")
    if entry.strip()
    for code, name in [entry.strip().split(" ", 1)]
}
CODES = frozenset(LANGUAGE_CODES.values())


def language_code(language: str) -> str:
    """``language`` as Whisper's code: a name (any case) becomes its code; anything else is returned
    lower-cased and stripped, for the caller's own check."""
    value = language.strip().lower()
    return LANGUAGE_CODES.get(value, value)
