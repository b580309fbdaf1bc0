import Glibc
import PinproxyCore

extension Deadline {
    /// Waits until `socket` is ready for `events` (or has an error for the next call to report);
    /// false when the deadline passes first.
    func wait(_ socket: Int32, for events: Int16) -> Bool {
        while true {
            let left = remaining
            guard left > 0 else { return false }
            var entry = pollfd(fd: socket, events: events, revents: 0)
            // Rounded up, so that a wait never ends just short of the deadline and spins.
            let ready = poll(&entry, 1, Int32((min(left, 86_400) * 1000).rounded(.up)))
            if ready > 0 || (ready < 0 && errno != EINTR) { return true }
        }
    }
}
