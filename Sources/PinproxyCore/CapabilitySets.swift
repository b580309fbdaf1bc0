/// A thread's capability sets, as `/proc/PID/task/TID/status` lists them (`CapInh`, `CapPrm`,
/// `CapEff`, `CapAmb`: 64-bit masks in hex).
public struct CapabilitySets: Sendable, Equatable {
    public let inheritable: UInt64
    public let permitted: UInt64
    public let effective: UInt64
    public let ambient: UInt64

    /// `CAP_NET_BIND_SERVICE`: binding a port below `ip_unprivileged_port_start`.
    public static let netBindService = 10

    /// Reads the four sets from a status file's text; nil when one is missing or malformed.
    public init?(status text: String) {
        var sets: [String: UInt64] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, ["CapInh", "CapPrm", "CapEff", "CapAmb"].contains(String(parts[0])) else { continue }
            guard let mask = UInt64(parts[1].trimmingPrefix { $0 == " " || $0 == "\t" }, radix: 16) else { return nil }
            sets[String(parts[0])] = mask
        }
        guard let inheritable = sets["CapInh"], let permitted = sets["CapPrm"], let effective = sets["CapEff"], let ambient = sets["CapAmb"] else { return nil }
        self.inheritable = inheritable
        self.permitted = permitted
        self.effective = effective
        self.ambient = ambient
    }

    /// Whether `capability` is in any of the four sets.
    public func holds(_ capability: Int) -> Bool {
        let bit = UInt64(1) << UInt64(capability)
        return (inheritable | permitted | effective | ambient) & bit != 0
    }
}
