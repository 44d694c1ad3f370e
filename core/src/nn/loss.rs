//! Loss functions, mean-reduced over the batch as PyTorch's defaults.

use crate::error::{ErrorKind, fail};
use crate::{Result, Tensor};

fn check_targets(scores: &Tensor, targets: &Tensor, op: &'static str) -> Result<()> {
    if scores.rank() != 2 {
        return Err(fail(
            ErrorKind::Shape,
            op,
            format_args!(
                "expects scores of shape [batch, classes], got {}",
                scores.shape()
            ),
        ));
    }
    if !targets.dtype().is_int() {
        return Err(fail(
            ErrorKind::DType,
            op,
            format_args!("expects integer class indices, got {}", targets.dtype()),
        ));
    }
    if targets.dims() != [scores.dims()[0]] {
        return Err(fail(
            ErrorKind::Shape,
            op,
            format_args!(
                "expects targets of shape [{}] for scores {}, got {}",
                scores.dims()[0],
                scores.shape(),
                targets.shape()
            ),
        ));
    }
    Ok(())
}

/// Negative log-likelihood of `targets` (class indices `[N]`, i32/u32) under `log_probs`
/// `[N, C]`, averaged over the batch (`torch.nn.functional.nll_loss`).
pub fn nll(log_probs: &Tensor, targets: &Tensor) -> Result<Tensor> {
    check_targets(log_probs, targets, "nll")?;
    let n = targets.dims()[0];
    let picked = log_probs.gather(1, &targets.reshape([n, 1])?)?;
    picked.mean_all()?.neg()
}

/// Cross-entropy of `logits` `[N, C]` against class indices `[N]`, with label smoothing `eps`
/// in `[0, 1)`: `(1 - eps) * nll + eps * mean_c(-log_softmax)`, averaged over the batch
/// (`torch.nn.functional.cross_entropy`).
pub fn cross_entropy(logits: &Tensor, targets: &Tensor, label_smoothing: f64) -> Result<Tensor> {
    check_targets(logits, targets, "cross_entropy")?;
    if !(0.0..1.0).contains(&label_smoothing) {
        return Err(fail(
            ErrorKind::InvalidArgument,
            "cross_entropy",
            format_args!("label_smoothing must be in [0, 1), got {label_smoothing}"),
        ));
    }
    let logp = logits.log_softmax(-1)?;
    let hard = nll(&logp, targets)?;
    if label_smoothing == 0.0 {
        return Ok(hard);
    }
    let smooth = logp.mean_all()?.neg()?;
    hard.mul_scalar(1.0 - label_smoothing)?
        .add(&smooth.mul_scalar(label_smoothing)?)
}

/// Mean squared error of two tensors of one shape.
pub fn mse(pred: &Tensor, target: &Tensor) -> Result<Tensor> {
    if pred.shape() != target.shape() {
        return Err(fail(
            ErrorKind::Shape,
            "mse",
            format_args!(
                "prediction {} and target {} differ in shape",
                pred.shape(),
                target.shape()
            ),
        ));
    }
    let d = pred.sub(target)?;
    d.mul(&d)?.mean_all()
}

/// Binary cross-entropy on logits, in the stable form
/// `max(x, 0) - x * t + log(1 + e^-|x|)`, averaged over all elements.
pub fn bce_with_logits(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    if logits.shape() != targets.shape() {
        return Err(fail(
            ErrorKind::Shape,
            "bce_with_logits",
            format_args!(
                "logits {} and targets {} differ in shape",
                logits.shape(),
                targets.shape()
            ),
        ));
    }
    let softplus = logits.abs()?.neg()?.exp()?.add_scalar(1.0)?.log()?;
    logits
        .relu()?
        .sub(&logits.mul(targets)?)?
        .add(&softplus)?
        .mean_all()
}
