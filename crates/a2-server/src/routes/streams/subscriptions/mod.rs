//! The handlers of the protocol's reserved subscription API
//! (`__ds/subscriptions/{id}`): managing a subscription (`manage`) and
//! consuming its wakes (`consume`); the subscriptions themselves are the
//! engine's ([`crate::streams::subscriptions`]).

pub(crate) mod bodies;
pub(crate) mod consume;
pub(crate) mod manage;

pub(crate) use consume::{ack, callback, claim, release};
pub(crate) use manage::{add_streams, confirm, jwks, remove, remove_stream, show};
