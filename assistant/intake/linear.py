"""The learned readers as plain arrays: what a fitted scikit-learn pipeline
computes, without scikit-learn.

Fitting needs scikit-learn (:mod:`learned`); reading a message does not. A
fitted pipeline is turned into one of these once, kept in the cache folder,
and a later process loads arrays (numpy alone: a tenth of a second, where
importing scikit-learn and unpickling its pipelines took a second, the
chat's first answer included). Each ``predict_proba`` gives what the
pipeline's own gives, to rounding (``tests/test_intake_learned.py`` holds
them to it on every corpus message):

- :class:`TextReader`: ``TfidfVectorizer(analyzer="char_wb", sublinear_tf=True)``
  (lower case, the n-grams of each word padded with one space, raw counts
  ``1 + ln(count)`` times the smoothed idf, scaled to unit length) then a
  multinomial logistic regression (softmax of the class scores);
- :class:`DictReader`: ``DictVectorizer`` (a feature name, or
  ``name=value`` for a string, to a column) then a binary logistic regression
  (the sigmoid of the score).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

_RUNS_OF_SPACE = re.compile(r"\s\s+")


def char_wb_ngrams(text: str, low: int, high: int) -> list[str]:
    """The character n-grams scikit-learn's ``char_wb`` analyzer takes from
    ``text`` (already lower-cased): within each word padded with a space;
    a word shorter than n gives itself once."""
    out = []
    for word in _RUNS_OF_SPACE.sub(" ", text).split():
        word = f" {word} "
        for n in range(low, high + 1):
            offset = 0
            out.append(word[:n])
            while offset + n < len(word):
                offset += 1
                out.append(word[offset:offset + n])
            if offset == 0:
                break
    return out


def _softmax(scores: np.ndarray) -> np.ndarray:
    scores = scores - scores.max(axis=1, keepdims=True)
    e = np.exp(scores)
    return e / e.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class TextReader:
    vocabulary: dict        # n-gram -> column
    idf: np.ndarray         # (columns,)
    coef: np.ndarray        # (classes, columns), or (1, columns) for two classes
    intercept: np.ndarray   # (classes,) or (1,)
    classes_: tuple         # as the pipeline names them (``classes_``, like scikit-learn's)
    ngrams: tuple[int, int]

    @classmethod
    def from_pipeline(cls, pipeline) -> "TextReader":
        vectorizer, regression = pipeline.steps[0][1], pipeline.steps[-1][1]
        assert vectorizer.analyzer == "char_wb" and vectorizer.sublinear_tf and vectorizer.lowercase
        assert vectorizer.norm == "l2" and vectorizer.use_idf and vectorizer.strip_accents is None
        return cls({str(k): int(v) for k, v in vectorizer.vocabulary_.items()}, np.asarray(vectorizer.idf_, dtype=float),
                   np.asarray(regression.coef_, dtype=float), np.asarray(regression.intercept_, dtype=float),
                   tuple(str(c) for c in regression.classes_), tuple(vectorizer.ngram_range))

    def _row(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        counts: dict[int, int] = {}
        for gram in char_wb_ngrams(text.lower(), *self.ngrams):
            column = self.vocabulary.get(gram)
            if column is not None:
                counts[column] = counts.get(column, 0) + 1
        columns = np.fromiter(counts, dtype=np.int64, count=len(counts))
        weights = np.array([1.0 + math.log(c) for c in counts.values()]) * self.idf[columns]
        norm = math.sqrt(float(weights @ weights)) if len(weights) else 0.0
        return columns, (weights / norm if norm else weights)

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        scores = []
        for text in texts:
            columns, weights = self._row(text)
            scores.append(self.coef[:, columns] @ weights + self.intercept)
        scores = np.array(scores)
        if self.coef.shape[0] == 1:  # two classes: the score is the second's
            p = 1.0 / (1.0 + np.exp(-scores[:, 0]))
            return np.column_stack([1.0 - p, p])
        return _softmax(scores)


@dataclass(frozen=True)
class DictReader:
    columns: dict           # feature name (or "name=value") -> column
    coef: np.ndarray        # (1, columns)
    intercept: np.ndarray   # (1,)
    separator: str = "="

    @classmethod
    def from_pipeline(cls, pipeline) -> "DictReader":
        vectorizer, regression = pipeline.steps[0][1], pipeline.steps[-1][1]
        assert regression.coef_.shape[0] == 1, "a binary regression"
        return cls({str(k): int(v) for k, v in vectorizer.vocabulary_.items()}, np.asarray(regression.coef_, dtype=float),
                   np.asarray(regression.intercept_, dtype=float), vectorizer.separator)

    def predict_proba(self, rows: list[dict]) -> np.ndarray:
        out = []
        for row in rows:
            score = float(self.intercept[0])
            for name, value in row.items():
                if isinstance(value, str):
                    name, value = f"{name}{self.separator}{value}", 1.0
                column = self.columns.get(name)
                if column is not None:
                    score += float(self.coef[0, column]) * float(value)
            out.append(score)
        p = 1.0 / (1.0 + np.exp(-np.array(out)))
        return np.column_stack([1.0 - p, p])
