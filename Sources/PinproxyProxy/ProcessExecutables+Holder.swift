import FoundationEssentials
import PinproxyInterop

extension ProcessExecutables {
    /// A process holding the socket `inode`, and its executable: processes of `uid` first
    /// (`hints` before the others), then every other process, until `deadline` (monotonic
    /// seconds) passes. Nil when none is found in time.
    public static func holder(ofSocket inode: UInt32, uid: UInt32, hints: [Int32], deadline: TimeInterval) -> (pid: Int32, executable: String)? {
        let target = Array("socket:[\(inode)]".utf8)
        var others: [Int32] = []
        var tried = Set<Int32>()
        func check(_ pid: Int32) -> (pid: Int32, executable: String)? {
            guard tried.insert(pid).inserted, holds(pid, target), let executable = executable(ofProcess: pid) else { return nil }
            return (pid, executable)
        }
        for pid in hints where owner(of: pid) == uid {
            if let found = check(pid) { return found }
        }
        for pid in processes() {
            guard ProcessLimits.monotonicSeconds() < deadline else { return nil }
            guard owner(of: pid) == uid else {
                others.append(pid)
                continue
            }
            if let found = check(pid) { return found }
        }
        // A process that is not dumpable (it changed its uid, say) has a /proc directory of root's.
        for pid in others {
            guard ProcessLimits.monotonicSeconds() < deadline else { return nil }
            if let found = check(pid) { return found }
        }
        return nil
    }
}
