//! Unit tests of escaping, number formatting and the log axis.

#![allow(clippy::unwrap_used)]
use super::roofline::{LogAxis, si_decade};
use super::*;
#[test]
fn escaping_covers_attribute_breakers() {
    assert_eq!(esc("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
}

#[test]
fn numbers_keep_four_significant_digits() {
    assert_eq!(sig(0.012341), "0.01234");
    assert_eq!(sig(1.23456), "1.235");
    assert_eq!(sig(123.456), "123.5");
    assert_eq!(sig(2.5e7), "2.500e7");
    assert_eq!(si(2.5e12, "FLOP/s"), "2.500 TFLOP/s");
    assert_eq!(si_decade(8, "FLOP/s"), "100 MFLOP/s");
    assert_eq!(si_decade(12, "FLOP/s"), "1 TFLOP/s");
}

#[test]
fn log_axis_spans_whole_decades_around_the_data() {
    let a = LogAxis::fit([3.0, 300.0].into_iter(), 0.0, 100.0).unwrap();
    assert_eq!((a.lo, a.hi), (0.0, 3.0));
    assert!((a.px(10.0) - 100.0 / 3.0).abs() < 1e-9);
}
