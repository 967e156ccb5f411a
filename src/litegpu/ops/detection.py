"""Detection post-processing: NON_MAX_SUPPRESSION_V4/V5, TFLite_Detection_PostProcess, WHERE.

These are sequential, data-dependent algorithms: the reference runs them on
the host in numpy, and where the output shape is static XLA reaches the same
code through a host callback, so there is one implementation to trust.

Ties matter here: the official kernels order equal scores through libstdc++'s
``std::priority_queue`` and ``std::partial_sort``, whose heap algorithms are
reproduced below step for step so that ties resolve as the official runtime
resolves them rather than by index.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ModelExecutionError, UnsupportedOpError
from ..ir import Operator, Subgraph
from ._custom_options import flex_options, optional, require
from .registry import Op, OpContext, Target, register


# --------------------------------------------------------------------------- libstdc++ heap algorithms

def _push_heap(c: list, hole: int, top: int, value: Any, less: Callable[[Any, Any], bool]) -> None:
    parent = (hole - 1) // 2
    while hole > top and less(c[parent], value):
        c[hole] = c[parent]
        hole = parent
        parent = (hole - 1) // 2
    c[hole] = value


def _adjust_heap(c: list, hole: int, length: int, value: Any, less: Callable[[Any, Any], bool]) -> None:
    """std::__adjust_heap on c[0:length]: sift the hole down, then push ``value`` up from it."""
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if less(c[child], c[child - 1]):
            child -= 1
        c[hole] = c[child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        c[hole] = c[child - 1]
        hole = child - 1
    _push_heap(c, hole, top, value, less)


class StdPriorityQueue:
    """std::priority_queue<T, deque<T>, less> with libstdc++'s push_heap/pop_heap."""

    def __init__(self, less: Callable[[Any, Any], bool]):
        self.c: list = []
        self.less = less

    def __len__(self) -> int:
        return len(self.c)

    def push(self, value: Any) -> None:
        self.c.append(value)
        _push_heap(self.c, len(self.c) - 1, 0, value, self.less)

    def top(self) -> Any:
        return self.c[0]

    def pop(self) -> None:
        n = len(self.c)
        if n > 1:
            value = self.c[n - 1]
            self.c[n - 1] = self.c[0]
            _adjust_heap(self.c, 0, n - 1, value, self.less)
        self.c.pop()


def std_partial_sort(items: list, middle: int, less: Callable[[Any, Any], bool]) -> list:
    """std::partial_sort(begin, begin + middle, end, less): heap select, then sort_heap."""
    c = list(items)
    if middle <= 0:
        return c
    # make_heap(first, middle)
    if middle >= 2:
        parent = (middle - 2) // 2
        while True:
            _adjust_heap(c, parent, middle, c[parent], less)
            if parent == 0:
                break
            parent -= 1
    for i in range(middle, len(c)):
        if less(c[i], c[0]):
            value = c[i]
            c[i] = c[0]
            _adjust_heap(c, 0, middle, value, less)
    # sort_heap(first, middle)
    last = middle
    while last > 1:
        last -= 1
        value = c[last]
        c[last] = c[0]
        _adjust_heap(c, 0, last, value, less)
    return c


def decreasing_partial_argsort(values: np.ndarray, num_to_sort: int) -> np.ndarray:
    """Indices of the ``num_to_sort`` largest values, largest first, as the official kernel orders them."""
    n = values.shape[0]
    if num_to_sort <= 0:
        return np.zeros(0, np.int64)
    if num_to_sort == 1:  # ArgMaxVector: the first maximum
        return np.array([int(np.argmax(values))])
    if np.unique(values).size == n:  # no ties: any correct sort agrees
        return np.argsort(-values, kind="stable")[:num_to_sort]
    order = std_partial_sort(list(range(n)), num_to_sort, lambda i, j: values[i] > values[j])
    return np.array(order[:num_to_sort], np.int64)


# --------------------------------------------------------------------------- NON_MAX_SUPPRESSION_V4 / V5

def _nms_iou(boxes: np.ndarray, i: int, selected: Sequence[int]) -> np.ndarray:
    """IoU (float32) of box i with each selected box, as reference_ops::NonMaxSuppression computes it."""
    b = boxes
    ymin, ymax = np.minimum(b[:, 0], b[:, 2]), np.maximum(b[:, 0], b[:, 2])
    xmin, xmax = np.minimum(b[:, 1], b[:, 3]), np.maximum(b[:, 1], b[:, 3])
    area = (ymax - ymin) * (xmax - xmin)
    j = np.asarray(selected, np.int64)
    inter = (np.maximum(np.minimum(ymax[i], ymax[j]) - np.maximum(ymin[i], ymin[j]), np.float32(0))
             * np.maximum(np.minimum(xmax[i], xmax[j]) - np.maximum(xmin[i], xmin[j]), np.float32(0)))
    union = area[i] + area[j] - inter
    degenerate = (area[i] <= 0) | (area[j] <= 0) | (union == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(degenerate, np.float32(0), inter / np.where(union == 0, np.float32(1), union))


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, max_output: int, iou_threshold: float,
                        score_threshold: float, sigma: float) -> tuple[list[int], list[float]]:
    """reference_ops::NonMaxSuppression (soft NMS when sigma > 0), step for step.

    Like the official kernel (and unlike TensorFlow's) a selected candidate goes
    back into the queue; it is then suppressed by itself unless its area is 0.
    """
    boxes = boxes.astype(np.float32)
    score_threshold, iou_threshold = np.float32(score_threshold), np.float32(iou_threshold)
    queue = StdPriorityQueue(lambda a, b: a[1] < b[1])  # (index, score, suppress_begin)
    for i in range(scores.shape[0]):
        if scores[i] > score_threshold:
            queue.push((i, np.float32(scores[i]), 0))
    selected: list[int] = []
    selected_scores: list[float] = []
    num_outputs = min(len(queue), max_output)
    scale = np.float32(-0.5) / np.float32(sigma) if sigma > 0 else np.float32(0)
    while len(selected) < num_outputs and len(queue):
        index, score, begin = queue.top()
        original = score
        queue.pop()
        hard = False
        previous = selected[begin:][::-1]
        ious = _nms_iou(boxes, index, previous) if previous else ()
        for iou in ious:
            if iou >= iou_threshold:
                hard = True
                break
            if sigma > 0:
                score = np.float32(score * np.exp(np.float32(scale * iou * iou)))
            if score <= score_threshold:
                break
        begin = len(selected)
        if not hard:
            if score == original:
                selected.append(index)
                selected_scores.append(score)
            if score > score_threshold:
                queue.push((index, score, begin))
    return selected, selected_scores


class _NonMaxSuppression(Op):
    dtypes = ("float32",)
    data_dependent_shape = True
    soft = False

    def unsupported_reason(self, op: Operator, subgraph: Subgraph, target: Target) -> str | None:
        reason = super().unsupported_reason(op, subgraph, target)
        if reason is None and target.is_xla and not _is_constant(op, subgraph, 2):
            return "output shape depends on data (max_output_size is not a constant)"
        return reason

    def _scalar(self, ctx: OpContext, value: Any, name: str) -> Any:
        value = np.asarray(value)
        if value.size != 1:
            raise ModelExecutionError(f"{ctx.op}: {name} must be a scalar, got shape {value.shape}")
        return value.reshape(())

    def _run(self, ctx: OpContext, boxes: np.ndarray, scores: np.ndarray, max_size: Any, iou: Any, score: Any,
             sigma: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        boxes, scores = np.asarray(boxes), np.asarray(scores)
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise ModelExecutionError(f"{ctx.op}: boxes must have shape [num_boxes, 4], got {boxes.shape}")
        if scores.shape != (boxes.shape[0],):
            raise ModelExecutionError(f"{ctx.op}: scores must have shape [{boxes.shape[0]}], got {scores.shape}")
        max_output = int(self._scalar(ctx, max_size, "max_output_size"))
        if max_output < 0:
            raise ModelExecutionError(f"{ctx.op}: max_output_size must be >= 0, got {max_output}")
        sigma_value = float(self._scalar(ctx, sigma, "soft_nms_sigma")) if sigma is not None else 0.0
        if sigma_value < 0:
            raise ModelExecutionError(f"{ctx.op}: soft_nms_sigma must be >= 0, got {sigma_value}")
        selected, kept_scores = non_max_suppression(boxes, scores, max_output, float(self._scalar(ctx, iou, "iou")),
                                                    float(self._scalar(ctx, score, "score_threshold")), sigma_value)
        # A constant max_output_size fixes the output length (zero padded); otherwise it is the count.
        length = max_output if ctx.constant(2) is not None else len(selected)
        indices = np.zeros(length, np.int32)
        values = np.zeros(length, np.float32)
        indices[:len(selected)] = selected
        values[:len(selected)] = kept_scores
        return indices, values, np.array(len(selected), np.int32)

    def lower(self, ctx: OpContext, *inputs: Any) -> Any:
        if ctx.constant(2) is None:
            raise UnsupportedOpError(f"{ctx.op}: output shape depends on data; run it on the CPU reference")
        length = int(np.asarray(ctx.constant(2)).reshape(()))
        shapes = self._result_shapes(length)
        return _host_call(ctx, lambda *a: self.reference(ctx, *a), shapes, inputs)


def _is_constant(op: Operator, subgraph: Subgraph, i: int) -> bool:
    return i < len(op.inputs) and op.inputs[i] >= 0 and subgraph.tensors[op.inputs[i]].has_data


def _host_call(ctx: OpContext, fn: Callable, shapes: Sequence[tuple[tuple[int, ...], Any]], inputs: Sequence[Any]) -> Any:
    """Run numpy ``fn`` on the host from inside an XLA program (static output shapes only)."""
    import jax

    specs = tuple(jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes)
    present = [x for x in inputs if x is not None]
    where = [i for i, x in enumerate(inputs) if x is not None]

    def host(*arrays: np.ndarray) -> tuple:
        full: list[Any] = [None] * len(inputs)
        for i, a in zip(where, arrays):
            full[i] = np.asarray(a)
        out = fn(*full)
        out = out if isinstance(out, (tuple, list)) else (out,)
        return tuple(np.asarray(o, dtype=s.dtype).reshape(s.shape) for o, s in zip(out, specs))

    result = jax.pure_callback(host, specs, *present)
    return result if len(result) > 1 else result[0]


@register("NON_MAX_SUPPRESSION_V4")
class NonMaxSuppressionV4(_NonMaxSuppression):
    """Outputs: selected_indices (int32), valid_outputs (int32 scalar)."""

    def reference(self, ctx: OpContext, boxes: Any, scores: Any, max_size: Any, iou: Any, score: Any) -> tuple:
        indices, _, count = self._run(ctx, boxes, scores, max_size, iou, score)
        return indices, count

    @staticmethod
    def _result_shapes(length: int) -> list:
        return [((length,), np.int32), ((), np.int32)]


@register("NON_MAX_SUPPRESSION_V5")
class NonMaxSuppressionV5(_NonMaxSuppression):
    """Soft NMS. Outputs: selected_indices (int32), selected_scores (float32), valid_outputs (int32)."""

    def reference(self, ctx: OpContext, boxes: Any, scores: Any, max_size: Any, iou: Any, score: Any,
                  sigma: Any = None) -> tuple:
        if sigma is None:
            raise ModelExecutionError(f"{ctx.op}: takes 6 inputs, soft_nms_sigma is missing")
        return self._run(ctx, boxes, scores, max_size, iou, score, sigma)

    @staticmethod
    def _result_shapes(length: int) -> list:
        return [((length,), np.int32), ((length,), np.float32), ((), np.int32)]


# --------------------------------------------------------------------------- TFLite_Detection_PostProcess

def _dequantize_float(ctx: OpContext, i: int, values: np.ndarray) -> np.ndarray:
    """The kernel's Dequantizer: (float(q) - zero_point) * scale, all in float."""
    if values.dtype == np.float32:
        return values
    q = ctx.input(i).quantization
    if q is None or not q.scale:
        raise ModelExecutionError(f"{ctx.op}: input {i} is {values.dtype} without quantization parameters")
    return (values.astype(np.float32) - np.float32(q.zero_point[0])) * np.float32(q.scale[0])


def _dequantize_scores(ctx: OpContext, values: np.ndarray) -> np.ndarray:
    """optimized_ops::Dequantize: scale (double) * (q - zero_point), rounded to float."""
    if values.dtype == np.float32:
        return values
    q = ctx.input(1).quantization
    if q is None or not q.scale:
        raise ModelExecutionError(f"{ctx.op}: class predictions are {values.dtype} without quantization parameters")
    return (np.float64(np.float32(q.scale[0])) * (values.astype(np.int64) - int(q.zero_point[0]))).astype(np.float32)


class _PostProcessOptions:
    def __init__(self, op: Operator):
        opts = flex_options(op)
        self.max_detections = require(op, opts, "max_detections", int)
        self.max_classes_per_detection = require(op, opts, "max_classes_per_detection", int)
        self.detections_per_class = optional(op, opts, "detections_per_class", int, 100)
        self.use_regular_nms = optional(op, opts, "use_regular_nms", bool, False)
        self.score_threshold = np.float32(require(op, opts, "nms_score_threshold", float))
        self.iou_threshold = np.float32(require(op, opts, "nms_iou_threshold", float))
        self.num_classes = require(op, opts, "num_classes", int)
        self.scales = [np.float32(require(op, opts, key, float)) for key in ("y_scale", "x_scale", "h_scale", "w_scale")]


def _decode_boxes(encodings: np.ndarray, anchors: np.ndarray, scales: list) -> np.ndarray:
    """Centre-size encodings -> corners [ymin, xmin, ymax, xmax], in double as the kernel does."""
    e = encodings[:, :4].astype(np.float64)
    a = anchors.astype(np.float64)
    ys, xs, hs, ws = (float(s) for s in scales)
    yc = (e[:, 0] / ys * a[:, 2] + a[:, 0]).astype(np.float32)
    xc = (e[:, 1] / xs * a[:, 3] + a[:, 1]).astype(np.float32)
    half_h = (0.5 * np.exp(e[:, 2] / hs) * a[:, 2]).astype(np.float32)
    half_w = (0.5 * np.exp(e[:, 3] / ws) * a[:, 3]).astype(np.float32)
    return np.stack([yc - half_h, xc - half_w, yc + half_h, xc + half_w], axis=1)


def _corner_iou(boxes: np.ndarray, i: int, others: np.ndarray) -> np.ndarray:
    """detection_postprocess's ComputeIntersectionOverUnion (no corner reordering), float32."""
    bi, bj = boxes[i], boxes[others]
    area_i = (bi[2] - bi[0]) * (bi[3] - bi[1])
    area_j = (bj[:, 2] - bj[:, 0]) * (bj[:, 3] - bj[:, 1])
    inter = (np.maximum(np.minimum(bi[2], bj[:, 2]) - np.maximum(bi[0], bj[:, 0]), np.float32(0))
             * np.maximum(np.minimum(bi[3], bj[:, 3]) - np.maximum(bi[1], bj[:, 1]), np.float32(0)))
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / (area_i + area_j - inter)
    return np.where((area_i <= 0) | (area_j <= 0), np.float32(0), iou)


def _single_class_nms(boxes: np.ndarray, scores: np.ndarray, max_detections: int, o: _PostProcessOptions) -> list[int]:
    keep = np.flatnonzero(scores >= o.score_threshold)
    order = keep[np.argsort(-scores[keep], kind="stable")]
    limit = min(len(order), max_detections)
    active = np.ones(len(order), bool)
    selected: list[int] = []
    for i in range(len(order)):
        if len(selected) >= limit or not active.any():
            break
        if not active[i]:
            continue
        selected.append(int(order[i]))
        active[i] = False
        rest = np.flatnonzero(active[i + 1:]) + i + 1
        if rest.size:
            suppressed = _corner_iou(boxes, int(order[i]), order[rest]) > o.iou_threshold
            active[rest[suppressed]] = False
    return selected


@register("TFLite_Detection_PostProcess", custom=True)
class DetectionPostProcess(Op):
    """SSD post-processing: decode boxes against anchors, then fast or per-class (regular) NMS.

    Outputs (float32): boxes [1, D, 4], classes [1, D], scores [1, D], count [1],
    D = max_detections * max_classes_per_detection; slots past the count are 0.
    """

    dtypes = ("float32", "uint8")

    def reference(self, ctx: OpContext, encodings: Any, predictions: Any, anchors: Any) -> tuple:
        o = _PostProcessOptions(ctx.op)
        encodings, predictions, anchors = np.asarray(encodings), np.asarray(predictions), np.asarray(anchors)
        self._validate(ctx, o, encodings, predictions, anchors)
        enc = _dequantize_float(ctx, 0, encodings[0])
        anc = _dequantize_float(ctx, 2, anchors)
        boxes = _decode_boxes(enc, anc, o.scales)
        if np.any((boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3])):
            raise ModelExecutionError(f"{ctx.op}: a decoded box has min > max (negative anchor size?)")
        scores = _dequantize_scores(ctx, predictions[0])
        label_offset = scores.shape[1] - o.num_classes
        scores = scores[:, label_offset:]
        total = o.max_detections * o.max_classes_per_detection
        out_boxes = np.zeros((total, 4), np.float32)
        out_classes = np.zeros(total, np.float32)
        out_scores = np.zeros(total, np.float32)
        if o.use_regular_nms:
            count = self._regular(o, boxes, scores, out_boxes, out_classes, out_scores)
        else:
            count = self._fast(o, boxes, scores, out_boxes, out_classes, out_scores)
        return out_boxes[None], out_classes[None], out_scores[None], np.array([count], np.float32)

    def _validate(self, ctx: OpContext, o: _PostProcessOptions, enc: np.ndarray, pred: np.ndarray,
                  anchors: np.ndarray) -> None:
        problems = []
        if enc.ndim != 3 or enc.shape[0] != 1 or enc.shape[2] < 4:
            problems.append(f"box encodings must be [1, num_boxes, >=4], got {enc.shape}")
        elif pred.ndim != 3 or pred.shape[:2] != enc.shape[:2]:
            problems.append(f"class predictions must be [1, {enc.shape[1]}, classes], got {pred.shape}")
        elif anchors.ndim != 2 or anchors.shape[0] < enc.shape[1] or anchors.shape[1] < 4:
            problems.append(f"anchors must be [{enc.shape[1]}, 4], got {anchors.shape}")
        elif not 0 <= pred.shape[2] - o.num_classes <= 1:
            problems.append(f"class predictions have {pred.shape[2]} columns for num_classes {o.num_classes} "
                            "(at most one background column)")
        if encodings_dtype_mismatch(enc, anchors):
            problems.append(f"anchors are {anchors.dtype} but box encodings are {enc.dtype}")
        if not 0 < o.iou_threshold <= 1:
            problems.append(f"nms_iou_threshold {o.iou_threshold} must be in (0, 1]")
        if o.max_detections < 0:
            problems.append(f"max_detections {o.max_detections} must be >= 0")
        if o.use_regular_nms and o.detections_per_class <= 0:
            problems.append(f"detections_per_class {o.detections_per_class} must be positive")
        if not o.use_regular_nms and o.max_classes_per_detection <= 0:
            problems.append(f"max_classes_per_detection {o.max_classes_per_detection} must be positive")
        if problems:
            raise ModelExecutionError(f"{ctx.op}: " + "; ".join(problems))

    @staticmethod
    def _fast(o: _PostProcessOptions, boxes: np.ndarray, scores: np.ndarray, out_boxes: np.ndarray,
              out_classes: np.ndarray, out_scores: np.ndarray) -> int:
        per_anchor = min(o.max_classes_per_detection, o.num_classes)
        top_classes = [decreasing_partial_argsort(row, per_anchor) for row in scores]
        max_scores = np.array([row[c[0]] for row, c in zip(scores, top_classes)], np.float32)
        selected = _single_class_nms(boxes, max_scores, o.max_detections, o)
        for k, anchor in enumerate(selected):
            for col in range(per_anchor):
                slot = o.max_classes_per_detection * k + col
                cls = top_classes[anchor][col]
                out_boxes[slot] = boxes[anchor]
                out_classes[slot] = cls
                out_scores[slot] = scores[anchor, cls]
        return len(selected)

    @staticmethod
    def _regular(o: _PostProcessOptions, boxes: np.ndarray, scores: np.ndarray, out_boxes: np.ndarray,
                 out_classes: np.ndarray, out_scores: np.ndarray) -> int:
        # (anchor, class) pairs and their scores; after each class the best max_detections survive
        kept: list[tuple[int, int]] = []
        kept_scores: list[float] = []
        for cls in range(o.num_classes):
            column = np.ascontiguousarray(scores[:, cls])
            for anchor in _single_class_nms(boxes, column, o.detections_per_class, o):
                kept.append((anchor, cls))
                kept_scores.append(column[anchor])
            values = np.array(kept_scores, np.float32)
            order = decreasing_partial_argsort(values, min(len(kept), o.max_detections))
            kept = [kept[i] for i in order]
            kept_scores = [kept_scores[i] for i in order]
        for slot, ((anchor, cls), score) in enumerate(zip(kept, kept_scores)):
            out_boxes[slot] = boxes[anchor]
            out_classes[slot] = cls
            out_scores[slot] = score
        return len(kept)

    def lower(self, ctx: OpContext, *inputs: Any) -> Any:
        o = _PostProcessOptions(ctx.op)
        total = o.max_detections * o.max_classes_per_detection
        shapes = [((1, total, 4), np.float32), ((1, total), np.float32), ((1, total), np.float32),
                  ((1,), np.float32)]
        return _host_call(ctx, lambda *a: self.reference(ctx, *a), shapes, inputs)


def encodings_dtype_mismatch(enc: np.ndarray, anchors: np.ndarray) -> bool:
    # the kernel dequantizes anchors with the encodings' type (uint8) or requires float anchors
    return enc.dtype != anchors.dtype


# --------------------------------------------------------------------------- WHERE

@register("WHERE")
class Where(Op):
    """Coordinates (int64, [num_true, rank]) of the true / non-zero elements, in row-major order."""

    dtypes = ("bool", "float32", "int32", "int64", "int8", "uint8", "uint32")
    data_dependent_shape = True

    def unsupported_reason(self, op: Operator, subgraph: Subgraph, target: Target) -> str | None:
        reason = super().unsupported_reason(op, subgraph, target)
        if reason is None and target.is_xla:
            return "output shape depends on data"
        return reason

    def reference(self, ctx: OpContext, condition: Any, *unused: Any) -> np.ndarray:
        if len([u for u in unused if u is not None]):
            raise ModelExecutionError(f"{ctx.op}: the 3-input form of WHERE is SELECT_V2; expected 1 input")
        condition = np.asarray(condition)
        if condition.ndim == 0:
            raise ModelExecutionError(f"{ctx.op}: the condition must have rank > 0, got a scalar")
        return np.argwhere(condition != 0).astype(np.int64)

    def lower(self, ctx: OpContext, *inputs: Any) -> Any:
        raise UnsupportedOpError(f"{ctx.op}: output shape depends on data; run it on the CPU reference")
