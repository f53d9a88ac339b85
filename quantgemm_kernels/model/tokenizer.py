"""The tokenizer a GGUF file carries, built with Hugging Face's ``tokenizers`` library.

A GGUF file of a GPT-2-style model (``tokenizer.ggml.model = "gpt2"``) holds a byte-level BPE:
``tokenizer.ggml.tokens`` (the vocabulary, already spelled in GPT-2's byte alphabet, ``Ġ`` for a
space), ``tokenizer.ggml.merges`` (``"Ġ t"``: the merge rules, best first) and
``tokenizer.ggml.pre``, the name of the pre-tokenizer: the regular expressions that cut text into
words before BPE runs inside each word. The pre-tokenizer matters as much as the merges: SmolLM2's
(``"smollm"``) splits every digit apart, so ``2024`` is four tokens however the merges go.
:data:`PRE_TOKENIZERS` maps llama.cpp's names to the same splits in ``tokenizers``.

Tokens the file marks as control (type 3, ``<|im_start|>``) are special tokens: they are matched
whole in the text, never cut into bytes, as llama.cpp does when it parses special tokens.
"""

from __future__ import annotations

from typing import Sequence

from .gguf_file import GGUFModelError

# llama.cpp's llm_tokenizer_bpe splits (llama-vocab.cpp), as tokenizers pre-tokenizers.
_GPT2 = "gpt2"  # ByteLevel(use_regex=True) is GPT-2's regex
_DIGITS_GPT2 = "digits+gpt2"  # "\p{N}" first (every digit alone), then GPT-2's regex
_LLAMA3 = "llama3"
#: llama.cpp's pre-tokenizer names (``tokenizer.ggml.pre``) -> the split this module builds.
PRE_TOKENIZERS: dict[str, str] = {
    **{n: _GPT2 for n in ("gpt2", "gpt-2", "mpt", "olmo", "jais", "trillion")},
    **{n: _DIGITS_GPT2 for n in ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva")},
    **{n: _LLAMA3 for n in ("llama3", "llama-v3", "llama-bpe", "falcon3", "smaug-bpe", "dbrx")},
}
# llama.cpp's LLAMA3 regex (its case-insensitive contractions spelled out, as llama.cpp does)
_LLAMA3_SPLIT = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types (gguf.TokenType)


class GGUFTokenizer:
    """Encode text to token ids and back with a GGUF file's own vocabulary and merges.

    ``encode(text)`` adds the BOS token when the file asks for it (``tokenizer.ggml.add_bos_token``)
    and matches control tokens written in the text; ``decode(ids)`` is its inverse (byte-level BPE
    is lossless: ``decode(encode(s)) == s`` for any string when no BOS is added).
    ``apply_chat_template(messages)`` renders the file's ``tokenizer.chat_template`` with jinja2.
    """

    def __init__(
        self,
        tokens: Sequence[str],
        merges: Sequence[str],
        *,
        pre: str = "gpt2",
        token_types: Sequence[int] | None = None,
        bos_id: int | None = None,
        eos_id: int | None = None,
        eot_id: int | None = None,
        add_bos: bool = False,
        chat_template: str | None = None,
    ):
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

        if pre not in PRE_TOKENIZERS:
            raise GGUFModelError(
                f"pre-tokenizer {pre!r} is not supported (supported: {', '.join(sorted(PRE_TOKENIZERS))})"
            )
        self.tokens = list(tokens)
        vocab = {t: i for i, t in enumerate(self.tokens)}
        if len(vocab) != len(self.tokens):
            raise GGUFModelError("the vocabulary holds the same token twice")
        pairs = []
        for m in merges:
            a, sep, b = m.partition(" ")
            if not sep or not a or not b or " " in b:
                raise GGUFModelError(f"merge {m!r} is not two tokens separated by one space")
            pairs.append((a, b))
        tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
        split = PRE_TOKENIZERS[pre]
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split != _LLAMA3)
        if split == _GPT2:
            tok.pre_tokenizer = byte_level
        elif split == _DIGITS_GPT2:
            tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        else:
            from tokenizers import Regex

            tok.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"), byte_level]
            )
        tok.decoder = decoders.ByteLevel()
        types = list(token_types) if token_types is not None else [1] * len(self.tokens)
        special = [AddedToken(t, special=True, normalized=False) for t, ty in zip(self.tokens, types) if ty == CONTROL]
        user = [
            AddedToken(t, special=False, normalized=False) for t, ty in zip(self.tokens, types) if ty == USER_DEFINED
        ]
        if special:
            tok.add_special_tokens(special)
        if user:
            tok.add_tokens(user)
        if tok.get_vocab_size() != len(self.tokens):
            raise GGUFModelError(f"the tokenizer has {tok.get_vocab_size()} tokens, the file {len(self.tokens)}")
        self._tok = tok
        self.pre = pre
        self.special_ids = frozenset(i for i, ty in enumerate(types) if ty == CONTROL)
        self.bos_id, self.eos_id, self.eot_id = bos_id, eos_id, eot_id
        self.add_bos = bool(add_bos)
        self.chat_template = chat_template

    @classmethod
    def from_fields(cls, fields: dict) -> "GGUFTokenizer":
        """From a file's ``tokenizer.*`` fields (``LlamaFile.fields``)."""
        model = fields.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise GGUFModelError(
                f"tokenizer model {model!r} is not supported (only 'gpt2', byte-level BPE); "
                "the model still runs on token ids"
            )
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
            if key not in fields:
                raise GGUFModelError(f"the file has no {key}")
        return cls(
            fields["tokenizer.ggml.tokens"],
            fields["tokenizer.ggml.merges"],
            pre=fields.get("tokenizer.ggml.pre", "default"),
            token_types=fields.get("tokenizer.ggml.token_type"),
            bos_id=fields.get("tokenizer.ggml.bos_token_id"),
            eos_id=fields.get("tokenizer.ggml.eos_token_id"),
            eot_id=fields.get("tokenizer.ggml.eot_token_id"),
            add_bos=fields.get("tokenizer.ggml.add_bos_token", False),
            chat_template=fields.get("tokenizer.chat_template"),
        )

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def stop_ids(self) -> frozenset:
        """Token ids that end a generation: EOS and end-of-turn, where the file names them."""
        return frozenset(i for i in (self.eos_id, self.eot_id) if i is not None)

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids of ``text``; BOS first if ``add_bos`` (default: what the file says)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if self.add_bos if add_bos is None else add_bos:
            if self.bos_id is None:
                raise GGUFModelError("the file asks for a BOS token but names none")
            ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids, skip_special: bool = False) -> str:
        """Text of token ids (control tokens written out unless ``skip_special``)."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]} is out of range for a vocabulary of {self.vocab_size}")
        return self._tok.decode(ids, skip_special_tokens=skip_special)

    def token_strings(self, ids) -> list[str]:
        """The vocabulary entries of ``ids``, as the file spells them (``Ġ`` for a space)."""
        return [self.tokens[int(i)] for i in ids]

    def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages`` (a str is one user message) by the file's chat template.

        Without a template in the file, the messages' contents joined by newlines (a plain prompt).
        """
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        if not self.chat_template:
            return "\n".join(m["content"] for m in messages)
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(msg):
            raise TemplateError(msg)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        name = lambda i: self.tokens[i] if i is not None else ""  # noqa: E731
        return env.from_string(self.chat_template).render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=name(self.bos_id),
            eos_token=name(self.eos_id),
        )
