import Foundation
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy
import XCTest

/// `TrustStore.verify` remembers chains it verified in the memory it is given (`VerifiedChains`). The memory may only save
/// work: whatever the time, CRLs or certificates, the answer is the one a fresh verification
/// gives. Each case verifies once to fill the memory, then asks what must differ.
final class VerifiedChainsTests: XCTestCase {
    var pki: PKI!
    var store: TrustStore!
    /// The memory of one config generation.
    var memory: VerifiedChains!
    var leaf: Certificate!
    var intermediates: [Certificate]!

    override func setUpWithError() throws {
        pki = try PKI.shared()
        memory = VerifiedChains()
        store = try TrustStore(anchors: [pki.certificate("root-a.pem")])
        let chain = try pki.certificates("api-chain.pem")
        leaf = chain[0]
        intermediates = Array(chain.dropFirst())
    }

    private func kinds(_ result: ChainVerification) -> Set<ChainProblem.Kind> { Set(result.problems.map(\.kind)) }

    func testTheSameChainVerifiesAgainWithTheSamePath() {
        let first = store.verify(leaf: leaf, intermediates: intermediates, at: evaluationTime, remembering: memory)
        XCTAssertTrue(first.isVerified, "\(first.problems)")
        let again = store.verify(leaf: leaf, intermediates: intermediates, at: evaluationTime.addingTimeInterval(1), remembering: memory)
        XCTAssertTrue(again.isVerified)
        XCTAssertEqual(again.chain, first.chain)
    }

    func testAnotherTimeOutsideTheValidityIsVerifiedAfresh() {
        XCTAssertTrue(store.verify(leaf: leaf, intermediates: intermediates, at: evaluationTime, remembering: memory).isVerified)
        let afterExpiry = leaf.notAfter.addingTimeInterval(1)
        XCTAssertEqual(kinds(store.verify(leaf: leaf, intermediates: intermediates, at: afterExpiry, remembering: memory)), [.expired])
        let beforeIssue = leaf.notBefore.addingTimeInterval(-1)
        XCTAssertEqual(kinds(store.verify(leaf: leaf, intermediates: intermediates, at: beforeIssue, remembering: memory)), [.notYetValid])
        // ...and the remembered answer still holds inside the validity.
        XCTAssertTrue(store.verify(leaf: leaf, intermediates: intermediates, at: evaluationTime, remembering: memory).isVerified)
    }

    func testOtherCRLsAreAnotherQuestion() throws {
        let revokedChain = try pki.certificates("revoked-chain.pem")
        let crls = try RevocationList.parseAll(pki.bytes("crl-int-a.pem"))
        XCTAssertTrue(store.verify(leaf: revokedChain[0], intermediates: Array(revokedChain.dropFirst()), at: evaluationTime, remembering: memory).isVerified)
        let checked = store.verify(leaf: revokedChain[0], intermediates: Array(revokedChain.dropFirst()), at: evaluationTime, crls: crls, remembering: memory)
        XCTAssertTrue(kinds(checked).contains(.revoked), "\(checked.problems)")
        // The genuine leaf under the same CRL verifies, and a stale CRL is not remembered as fresh.
        XCTAssertTrue(store.verify(leaf: leaf, intermediates: intermediates, at: evaluationTime, crls: crls, remembering: memory).isVerified)
        if let nextUpdate = crls.first?.nextUpdate, nextUpdate < leaf.notAfter {
            let late = store.verify(leaf: leaf, intermediates: intermediates, at: nextUpdate.addingTimeInterval(1), crls: crls, remembering: memory)
            XCTAssertTrue(kinds(late).contains(.revocationUnknown), "\(late.problems)")
        }
    }

    func testAnotherStoreOrChainIsNotAnswered() throws {
        XCTAssertTrue(store.verify(leaf: leaf, intermediates: intermediates, at: evaluationTime, remembering: memory).isVerified)
        let otherRoot = try TrustStore(anchors: [pki.certificate("root-b.pem")])
        XCTAssertFalse(otherRoot.verify(leaf: leaf, intermediates: intermediates, at: evaluationTime, remembering: memory).isVerified)
        // The leaf alone (its intermediate left out) builds no path to the root.
        XCTAssertFalse(store.verify(leaf: leaf, intermediates: [], at: evaluationTime, remembering: memory).isVerified)
        let untrusted = try pki.certificates("untrusted-chain.pem")
        XCTAssertFalse(store.verify(leaf: untrusted[0], intermediates: Array(untrusted.dropFirst()), at: evaluationTime, remembering: memory).isVerified)
    }
}
