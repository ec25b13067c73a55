//! The arguments of a script or function call, in one buffer.
//!
//! A work cycle's event passes about twenty arguments to the server (an
//! append's and a completion's, each behind its prelude in the batch).
//! Kept as a vector each, and the prelude's built again for the batch,
//! they were about thirty allocations per event, a fifth of the client's,
//! and their text formatting a few percent of its instructions; here every
//! argument is a range of one byte buffer, numbers are written into it
//! with `itoa`, and a batch gathers its operations' arguments with one
//! copy each.

/// Arguments in order, each a byte string, in one buffer. Operation
/// encoders push each value with the name the script's header gives it;
/// tests compare those names with the header.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct Args {
    data: Vec<u8>,
    /// Where each argument ends in `data` (it starts where the previous
    /// one ends).
    ends: Vec<usize>,
    #[cfg(test)]
    pub(crate) names: Vec<&'static str>,
}

impl Args {
    /// Room for `count` arguments of `bytes` bytes in all.
    pub(crate) fn with_capacity(count: usize, bytes: usize) -> Self {
        Self {
            data: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(count),
            #[cfg(test)]
            names: Vec::new(),
        }
    }

    /// Pushes a string or bytes.
    pub(crate) fn s(&mut self, name: &'static str, value: impl AsRef<[u8]>) -> &mut Self {
        self.name(name);
        self.push(value.as_ref());
        self
    }

    /// Pushes a number, as decimal text.
    pub(crate) fn n(&mut self, name: &'static str, value: impl itoa::Integer) -> &mut Self {
        self.name(name);
        self.push_number(value);
        self
    }

    #[cfg(test)]
    fn name(&mut self, name: &'static str) {
        self.names.push(name);
    }

    #[cfg(not(test))]
    fn name(&mut self, _: &'static str) {}

    /// Pushes an argument that has no name (a batch's prelude).
    pub(crate) fn push(&mut self, value: &[u8]) {
        self.data.extend_from_slice(value);
        self.ends.push(self.data.len());
    }

    /// Pushes a number without a name.
    pub(crate) fn push_number(&mut self, value: impl itoa::Integer) {
        self.push(itoa::Buffer::new().format(value).as_bytes());
    }

    /// Pushes every argument of `other` after these.
    pub(crate) fn extend(&mut self, other: &Args) {
        let base = self.data.len();
        self.data.extend_from_slice(&other.data);
        self.ends.extend(other.ends.iter().map(|end| base + end));
        #[cfg(test)]
        self.names.extend_from_slice(&other.names);
    }

    /// How many arguments.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The bytes of every argument together.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Argument `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&[u8]> {
        let end = *self.ends.get(index)?;
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        Some(&self.data[start..end])
    }

    /// The arguments in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + Clone + '_ {
        let data = &self.data;
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let arg = &data[start..end];
            start = end;
            arg
        })
    }

    /// The arguments as vectors of their own (for the REST client's
    /// commands).
    pub fn to_vecs(&self) -> Vec<Vec<u8>> {
        self.iter().map(<[u8]>::to_vec).collect()
    }
}

impl<T: AsRef<[u8]>> FromIterator<T> for Args {
    fn from_iter<I: IntoIterator<Item = T>>(values: I) -> Self {
        let mut args = Args::default();
        for value in values {
            args.push(value.as_ref());
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_come_back_as_they_went_in() {
        let mut args = Args::default();
        args.s("a", "x").n("b", 42u64).s("c", "").n("d", -7i64);
        assert_eq!(args.len(), 4);
        assert_eq!(args.names, ["a", "b", "c", "d"]);
        let got: Vec<&[u8]> = args.iter().collect();
        assert_eq!(got, [b"x".as_slice(), b"42", b"", b"-7"]);
        assert_eq!(args.get(1), Some(b"42".as_slice()));
        assert_eq!(args.get(2), Some(b"".as_slice()));
        assert_eq!(args.get(4), None);
        assert_eq!(args.bytes(), 5);

        let mut all: Args = ["p", "q"].into_iter().collect();
        all.extend(&args);
        let got: Vec<&[u8]> = all.iter().collect();
        assert_eq!(got, [b"p".as_slice(), b"q", b"x", b"42", b"", b"-7"]);
        assert_eq!(all.to_vecs()[3], b"42");
        assert_eq!(all.iter().len(), 6);
    }

    #[test]
    fn an_empty_list_has_no_arguments() {
        let args = Args::default();
        assert!(args.is_empty());
        assert_eq!(args.iter().count(), 0);
        assert_eq!(args.get(0), None);
    }
}
