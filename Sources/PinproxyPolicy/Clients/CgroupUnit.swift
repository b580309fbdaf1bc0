import PinproxyCore

/// The system unit of a client's cgroup, as far as a walk of the hierarchy tells it.
public enum CgroupUnit: Sendable, Equatable {
    /// The cgroup is `NAME.service`'s, or below it at any depth.
    case unit(String)
    /// The cgroup is no system unit's (a user's session, the root, a slice).
    case noUnit
    /// The walk cannot tell (`why` says why): the client is `unknown`, and the answer is not
    /// cached, so the next client's walk asks again.
    case unknown(why: String)

    /// The unit of cgroup `id` after `walk` (`CgroupTree.walk` from `/system.slice`, then the
    /// rest of the hierarchy, until it met `id`). A cgroup it did not meet is unknown, never
    /// "no unit": the walk stopped at its bound, could not list a directory (removed meanwhile,
    /// or unreadable), or saw everything without it (the cgroup was removed after the socket
    /// was made in it, as a unit that delegates its subtree can do on purpose).
    public static func of(cgroup id: UInt64, after walk: CgroupWalk) -> CgroupUnit {
        if walk.end == .found, let found = walk.cgroups.last, found.id == id {
            return SystemUnit.name(ofCgroup: found.path).map(CgroupUnit.unit) ?? .noUnit
        }
        switch (walk.end, walk.gap) {
        case (.bound(let limit), _):
            return .unknown(why: "cgroup \(id) was not among the first \(limit) cgroups, the bound of a walk")
        case (_, .some(let gap)):
            return .unknown(why: "cgroup \(id) was not found, and \(gap)")
        case (.found, nil), (.complete, nil):
            return .unknown(why: "cgroup \(id) is no longer in the hierarchy (removed after the socket was made in it)")
        }
    }

    /// Whether the answer may be cached for good (a cgroup id is never reused while the system runs).
    public var isSettled: Bool {
        if case .unknown = self { return false }
        return true
    }
}

extension SystemUnit {
    /// `name(ofCgroup:)` of a path as the bytes the kernel gave: a component that is not
    /// UTF-8 is no slice and no service.
    public static func name(ofCgroup path: FilePathBytes) -> String? {
        let components = path.bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        guard components.count >= 3, components[0].isEmpty, components[1].elementsEqual("system.slice".utf8) else { return nil }
        for component in components.dropFirst(2) {
            let text = String(validating: component, as: UTF8.self)
            if let text, text.hasSuffix(".slice") { continue }
            guard let text, isServiceName(text) else { return nil }
            return text
        }
        return nil
    }
}
