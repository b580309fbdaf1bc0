import FoundationEssentials
import PinproxyCore
import PinproxyInterop

extension OCSPStaple {
    /// Clock skew tolerated on thisUpdate and nextUpdate.
    static let skew: TimeInterval = 300

    /// Checks `der` (an OCSPResponse) for `leaf`, issued by `issuer`, at `time`. Only responses
    /// signed by the issuer itself are accepted (no delegated responders).
    public static func check(_ der: [UInt8], leaf: Certificate, issuer: Certificate, at time: Date) -> StapleStatus {
        judge(read(der, leaf: leaf, issuer: issuer), at: time)
    }

    /// What `reading` says at `time`: usable only within its validity period, give or take `skew`.
    static func judge(_ reading: StapleReading, at time: Date) -> StapleStatus {
        let (status, thisUpdate, nextUpdate): (StapleReading.Status, Date?, Date?)
        switch reading {
        case .unusable(let why): return .unusable(why)
        case .answer(let answered, let from, let until): (status, thisUpdate, nextUpdate) = (answered, from, until)
        }
        guard let produced = thisUpdate, produced <= time + skew else {
            return .unusable("the staple is not yet valid")
        }
        guard let expiry = nextUpdate else { return .unusable("the staple has no nextUpdate") }
        guard time <= expiry + skew else { return .unusable("the staple is out of date (nextUpdate \(expiry))") }
        switch status {
        case .good: return .good
        case .revoked(let since): return .revoked(since: since)
        case .unknown: return .unusable("the responder does not know the certificate")
        }
    }
}
