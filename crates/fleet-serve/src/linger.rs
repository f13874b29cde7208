//! Lingering reads: a request body that a handler drops before its end is read to its end
//! in the background, for a while.
//!
//! An answer given before the body is read (a 413, a rejection that needs no body) is
//! otherwise followed by the server closing a socket that still holds unread bytes, which
//! makes the kernel reset the connection, and a client still writing its body (a release
//! tarball) gets a broken pipe instead of the answer. Reading on lets the client finish
//! writing and read the answer; the connection closes once the body ends or the time is up.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;

/// How long a dropped body is read on at most.
pub const LINGER: Duration = Duration::from_secs(10);

/// `body`, read on in the background when it is dropped before its end.
pub fn lingering(body: Body) -> Body {
    Body::new(Lingering { inner: Some(body) })
}

struct Lingering {
    /// `None` once the body ended or failed: nothing is left to read.
    inner: Option<Body>,
}

impl http_body::Body for Lingering {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.inner = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(mut body) = self.inner.take() else {
            return;
        };
        if body.is_end_stream() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let rest = async { while let Some(Ok(_)) = body.frame().await {} };
                let _ = tokio::time::timeout(LINGER, rest).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A body of `left` one-byte chunks that counts how many were read.
    struct Counted {
        left: usize,
        read: Arc<AtomicUsize>,
    }

    impl http_body::Body for Counted {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            if self.left == 0 {
                return Poll::Ready(None);
            }
            self.left -= 1;
            self.read.fetch_add(1, Ordering::SeqCst);
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
        }
    }

    /// A body whose chunks come from a channel, ending when the sender goes.
    struct Channel(tokio::sync::mpsc::Receiver<Bytes>);

    impl http_body::Body for Channel {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            self.0.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b))))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_dropped_before_its_end_is_read_to_its_end() {
        let read = Arc::new(AtomicUsize::new(0));
        let counted = Counted {
            left: 100,
            read: Arc::clone(&read),
        };
        let mut body = lingering(Body::new(counted));
        body.frame().await.unwrap().unwrap();
        assert_eq!(read.load(Ordering::SeqCst), 1);
        drop(body);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(read.load(Ordering::SeqCst), 100, "the rest was read");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_ends_is_read_for_the_linger_time_only() {
        let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(1);
        drop(lingering(Body::new(Channel(receiver))));
        tokio::time::sleep(LINGER / 2).await;
        assert!(sender.send(Bytes::from_static(b"x")).await.is_ok());
        assert!(!sender.is_closed(), "still read half way through");
        tokio::time::sleep(LINGER).await;
        assert!(
            sender.is_closed(),
            "the reader gave up after the linger time"
        );
    }
}
