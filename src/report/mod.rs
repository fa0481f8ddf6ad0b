//! What the wrapper says on stderr: one line per event, text or JSON ([`reporter`]), written
//! by a thread of its own so that a blocked stderr never blocks the supervisor ([`sink`]).

mod reporter;
mod sink;

pub use reporter::{PauseFields, Reporter, RunFields, one_line};
pub use sink::drain;
